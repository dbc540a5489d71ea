// The elementwise helpers the Newton-Schulz forms share (NsScratch.h). Every
// pass over a matrix and its transpose is tiled, with the inner loop on the
// contiguous side of the written matrix and small tiles: at power-of-two
// widths (1024, 2048, 4096) the strided side's rows all map to one L1 set,
// so tall tiles written down a column evict each other on every row; writing
// along the contiguous side keeps a mirror cheap beside the SYRK it follows.
#include "kernels/cpu/NsScratch.h"

#include <algorithm>
#include <cmath>

namespace dmuon::kernels::nsdetail {
namespace {

constexpr int64_t kTile = 8;

// f(upper, lower) on every pair (i, j), (j, i) with i < j, tile by tile;
// the lower triangle's rows are the inner loop.
template <typename F> void forEachMirroredPair(float *a, int64_t n, F f) {
  for (int64_t j0 = 0; j0 < n; j0 += kTile) {
    const int64_t j1 = std::min(n, j0 + kTile);
    for (int64_t i0 = 0; i0 <= j0; i0 += kTile) {
      const int64_t i1 = std::min(n, i0 + kTile);
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = i0; i < std::min(i1, j); ++i)
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
  for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
    const int64_t j1 = std::min(cols, j0 + kTile);
    for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
      const int64_t i1 = std::min(rows, i0 + kTile);
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = i0; i < i1; ++i)
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
