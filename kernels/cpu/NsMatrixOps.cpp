// The elementwise helpers the Newton-Schulz forms share (NsScratch.h). All
// passes over an n x n matrix's two triangles are tiled so that the strided
// side stays in cache: an untiled mirror of a 2048 x 2048 matrix costs as
// much as a good part of a SYRK.
#include "kernels/cpu/NsScratch.h"

#include <algorithm>
#include <cmath>

namespace dmuon::kernels::nsdetail {
namespace {

constexpr int64_t kTile = 32;

// f(upper, lower) on every pair (i, j), (j, i) with i < j, tile by tile.
template <typename F> void forEachMirroredPair(float *a, int64_t n, F f) {
  for (int64_t i0 = 0; i0 < n; i0 += kTile) {
    const int64_t i1 = std::min(n, i0 + kTile);
    for (int64_t j0 = i0; j0 < n; j0 += kTile) {
      const int64_t j1 = std::min(n, j0 + kTile);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = std::max(j0, i + 1); j < j1; ++j)
          f(a[i * n + j], a[j * n + i]);
    }
  }
}

} // namespace

float normalizationFactor(const float *in, int64_t n, NsCoefficients set) {
  double sumSq = 0.0;
  for (int64_t i = 0; i < n; ++i)
    sumSq += static_cast<double>(in[i]) * static_cast<double>(in[i]);
  return static_cast<float>(
      1.0 / (static_cast<double>(nsNormScale(set)) * std::sqrt(sumSq) + 1e-7));
}

void transposeScaled(const float *in, float *out, int64_t rows, int64_t cols, float scale) {
  for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
    const int64_t i1 = std::min(rows, i0 + kTile);
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const int64_t j1 = std::min(cols, j0 + kTile);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j)
          out[j * rows + i] = in[i * cols + j] * scale;
    }
  }
}

void mirrorUpper(float *a, int64_t n) {
  forEachMirroredPair(a, n, [](float &upper, float &lower) { lower = upper; });
}

void symmetrize(float *a, int64_t n) {
  forEachMirroredPair(a, n, [](float &upper, float &lower) {
    const float mean = 0.5f * (upper + lower);
    upper = mean;
    lower = mean;
  });
}

void polyUpper(float *c, const float *a, const float *b, int64_t n, float alpha, float beta,
               float gamma) {
  for (int64_t i = 0; i < n; ++i) {
    const float *ar = a + i * n;
    const float *br = b + i * n;
    float *cr = c + i * n;
    for (int64_t j = i; j < n; ++j)
      cr[j] = alpha * ar[j] + beta * br[j];
    cr[i] += gamma;
  }
  mirrorUpper(c, n);
}

} // namespace dmuon::kernels::nsdetail
