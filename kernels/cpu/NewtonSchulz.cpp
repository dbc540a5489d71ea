// Newton-Schulz orthogonalization on OpenBLAS (fp32, row-major).
//
// X = G / (s * ||G||_F + 1e-7)   (s = nsNormScale(set); the norm is accumulated
//                                 in double)
// if rows > cols: X = X^T         (so that A = X X^T is the small s x s Gram)
// repeat steps:  A = X X^T;  B = b A + c (A A);  X = a X + B X
// if rows > cols: X = X^T
//
// Each iteration is three sgemm calls: the Gram matrix, then B with sgemm's
// beta fusing the b*A term (B is preloaded with A), then the new X with beta
// fusing the a*X term (the destination is preloaded with X). The iteration
// ping-pongs between two s x l buffers; on the last iteration of an
// untransposed matrix it writes straight into `out`.
#include "kernels/cpu/MuonKernels.h"
#include "kernels/cpu/NsScratch.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace dmuon::kernels {
namespace {

struct Coeffs {
  double a, b, c;
};

// Keller Jordan's quintic, used unchanged on every iteration (torch.optim.Muon
// defaults).
constexpr Coeffs kOriginal = {3.4445, -4.7750, 2.0315};

// The Polar Express degree-5 coefficient sets, one per iteration, as given in
// Algorithm 1 of N. Amsel, D. Persson, C. Musco, R. M. Gower, "The Polar
// Express: Optimal Matrix Sign Methods and Their Application to the Muon
// Algorithm", arXiv:2505.16932 (2025). Iterations past the last set reuse it
// (the optimal polynomials have converged numerically to (15x-10x^3+3x^5)/8).
constexpr Coeffs kPolarExpress[] = {
    {8.28721201814563, -23.595886519098837, 17.300387312530933},
    {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
    {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
    {3.3184196573706015, -2.488488024314874, 0.51004894012372},
    {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
    {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
    {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
    {1.875, -1.25, 0.375},
};
constexpr int kPolarExpressCount = static_cast<int>(sizeof(kPolarExpress) / sizeof(kPolarExpress[0]));

// The paper's safety factor (Section 4.4 / Algorithm 1), for stability in low
// precision: every set but the last becomes p(x/1.01), i.e. (a/1.01,
// b/1.01^3, c/1.01^5), and the input is normalized by 1.01*||G||_F + 1e-7
// instead of ||G||_F + 1e-7. We keep both so that results match the
// reference algorithm.
constexpr double kPolarExpressSafety = 1.01;

// out (cols x rows) = in (rows x cols)^T * scale, both row-major; tiled so
// that both sides stay in cache.
void transposeScaled(const float *in, float *out, int64_t rows, int64_t cols, float scale) {
  constexpr int64_t kTile = 32;
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

} // namespace

int nsCoefficientCount(NsCoefficients set) {
  return set == NsCoefficients::PolarExpress ? kPolarExpressCount : 1;
}

float nsNormScale(NsCoefficients set) {
  return set == NsCoefficients::PolarExpress ? static_cast<float>(kPolarExpressSafety) : 1.0f;
}

void nsCoefficients(NsCoefficients set, int iteration, float &a, float &b, float &c) {
  if (set != NsCoefficients::PolarExpress) {
    a = static_cast<float>(kOriginal.a);
    b = static_cast<float>(kOriginal.b);
    c = static_cast<float>(kOriginal.c);
    return;
  }
  const int i = std::clamp(iteration, 0, kPolarExpressCount - 1);
  const Coeffs &k = kPolarExpress[i];
  const double s = i == kPolarExpressCount - 1 ? 1.0 : kPolarExpressSafety;
  a = static_cast<float>(k.a / s);
  b = static_cast<float>(k.b / (s * s * s));
  c = static_cast<float>(k.c / (s * s * s * s * s));
}

int64_t nsWorkspaceFloats(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0)
    return 0;
  const int64_t s = std::min(rows, cols);
  const int64_t l = std::max(rows, cols);
  return 2 * s * l + 2 * s * s; // X, Y (s x l); A, B (s x s)
}

void newtonSchulzScratch(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                         NsCoefficients set, float *scratch) {
  if (rows <= 0 || cols <= 0)
    return;
  const bool transposed = rows > cols;
  const int64_t s = transposed ? cols : rows; // Gram side
  const int64_t l = transposed ? rows : cols;
  const int64_t n = rows * cols;
  float *x = scratch;
  float *y = x + s * l;
  float *gram = y + s * l;
  float *poly = gram + s * s;

  double sumSq = 0.0;
  for (int64_t i = 0; i < n; ++i)
    sumSq += static_cast<double>(in[i]) * static_cast<double>(in[i]);
  const float inv = static_cast<float>(
      1.0 / (static_cast<double>(nsNormScale(set)) * std::sqrt(sumSq) + 1e-7));
  if (transposed) {
    transposeScaled(in, x, rows, cols, inv);
  } else {
    for (int64_t i = 0; i < n; ++i)
      x[i] = in[i] * inv;
  }

  const auto S = static_cast<int>(s);
  const auto L = static_cast<int>(l);
  bool inOut = false; // the current X already lives in `out`
  for (int k = 0; k < steps; ++k) {
    float a, b, c;
    nsCoefficients(set, k, a, b, c);
    // A = X X^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, S, S, L, 1.0f, x, L, x, L, 0.0f, gram, S);
    // B = c (A A) + b A
    std::memcpy(poly, gram, static_cast<size_t>(s * s) * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, c, gram, S, gram, S, b, poly,
                S);
    // X' = B X + a X
    const bool last = k + 1 == steps;
    float *dst = (last && !transposed) ? out : y;
    std::memcpy(dst, x, static_cast<size_t>(s * l) * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, L, S, 1.0f, poly, S, x, L, a, dst,
                L);
    if (dst == out) {
      inOut = true;
    } else {
      std::swap(x, y);
    }
  }

  if (inOut)
    return;
  if (transposed) {
    transposeScaled(x, out, cols, rows, 1.0f); // x is cols x rows
  } else {
    std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
  }
}

void newtonSchulz(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                  NsCoefficients set, NsWorkspace &ws) {
  const auto need = static_cast<size_t>(nsWorkspaceFloats(rows, cols));
  if (ws.buffer.size() < need)
    ws.buffer.resize(need);
  newtonSchulzScratch(in, out, rows, cols, steps, set, ws.buffer.data());
}

} // namespace dmuon::kernels
