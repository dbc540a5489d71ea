// Newton-Schulz orthogonalization on OpenBLAS (fp32, row-major): the
// three-GEMM reference form and the dispatch over forms (NsSymmetric.cpp,
// NsGram.cpp; the rule behind NsForm::Auto is in kernels/NsForms.h).
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
#include "kernels/NsCoefficients.h"
#include "kernels/NsForms.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace dmuon::kernels {
// The coefficient tables and the Polar Express safety factor live in
// kernels/NsCoefficients.h, shared with the CUDA kernels.
int nsCoefficientCount(NsCoefficients set) {
  return ns::coefficientCount(set == NsCoefficients::PolarExpress);
}

float nsNormScale(NsCoefficients set) {
  return ns::normScale(set == NsCoefficients::PolarExpress);
}

void nsCoefficients(NsCoefficients set, int iteration, float &a, float &b, float &c) {
  ns::coefficients(set == NsCoefficients::PolarExpress, iteration, a, b, c);
}

int64_t nsWorkspaceFloats(int64_t rows, int64_t cols, NsForm form) {
  if (rows <= 0 || cols <= 0)
    return 0;
  const int64_t s = std::min(rows, cols);
  const int64_t l = std::max(rows, cols);
  switch (ns::resolveForm(form, rows, cols)) {
  case NsForm::Gram:
    return 2 * s * l + 4 * s * s; // X0, restart iterate (s x l); A, Q, P, T (s x s)
  case NsForm::Symmetric:
  case NsForm::ThreeGemm:
  case NsForm::Auto:
    break;
  }
  return 2 * s * l + 2 * s * s; // X, Y (s x l); A, B (s x s)
}

void newtonSchulzScratch(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                         NsCoefficients set, NsForm form, float *scratch) {
  if (rows <= 0 || cols <= 0)
    return;
  if (steps <= 0) { // every form is the normalization alone
    const int64_t n = rows * cols;
    const float inv = nsdetail::normalizationFactor(in, n, set);
    for (int64_t i = 0; i < n; ++i)
      out[i] = in[i] * inv;
    return;
  }
  switch (ns::resolveForm(form, rows, cols)) {
  case NsForm::Symmetric:
    nsSymmetric(in, out, rows, cols, steps, set, scratch);
    return;
  case NsForm::Gram:
    nsGram(in, out, rows, cols, steps, set, scratch);
    return;
  case NsForm::ThreeGemm:
  case NsForm::Auto:
    break;
  }
  nsThreeGemm(in, out, rows, cols, steps, set, scratch);
}

// The reference form: each iteration is three sgemm calls (see the top of
// the file). Tall matrices are transposed in and out.
void nsThreeGemm(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                 NsCoefficients set, float *scratch) {
  const bool transposed = rows > cols;
  const int64_t s = transposed ? cols : rows; // Gram side
  const int64_t l = transposed ? rows : cols;
  const int64_t n = rows * cols;
  float *x = scratch;
  float *y = x + s * l;
  float *gram = y + s * l;
  float *poly = gram + s * s;

  const float inv = nsdetail::normalizationFactor(in, n, set);
  if (transposed) {
    nsdetail::transposeScaled(in, x, rows, cols, inv);
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
    nsdetail::transposeScaled(x, out, cols, rows, 1.0f); // x is cols x rows
  } else {
    std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
  }
}

void newtonSchulz(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                  NsCoefficients set, NsWorkspace &ws, NsForm form) {
  const auto need = static_cast<size_t>(nsWorkspaceFloats(rows, cols, form));
  if (ws.buffer.size() < need)
    ws.buffer.resize(need);
  newtonSchulzScratch(in, out, rows, cols, steps, set, form, ws.buffer.data());
}

} // namespace dmuon::kernels
