// The Gram form of Newton-Schulz: iterate on the s x s Gram matrix and touch
// the s x l matrix only at the ends.
//
// With X_{k+1} = Q_k X_k, Q_k = aI + b A_k + c A_k^2 and A_k = X_k X_k^T,
// every Q_k is a polynomial in A_0, so they all commute and
//   A_{k+1} = Q_k A_k Q_k = A_k Q_k^2,   X_K = (Q_{K-1} ... Q_0) X_0 = P X_0.
// So one segment of the run is
//   A = X0 X0^T                     SYRK over the long side, once
//   per iteration:  A2 = A A^T      SYRK (A symmetric: A^2)
//                   Q = aI + bA + cA2
//                   P = Q P         GEMM (P = Q on the first iteration)
//                   Q2 = Q Q^T      SYRK, skipped on the segment's last
//                   A = A Q2        GEMM, symmetrized; skipped likewise
//   X = P X0                        GEMM over the long side, once
// All in G's own layout: a tall X0 (l x s) uses A = X0^T X0 and X = X0 P^T.
//
// Rounding: P's eigenvalues are f(x)/x for the composed polynomial f, up to
// a^K (~500 for Original at K = 5) on directions where X0 is near zero, so
// its relative error grows with the iterations that built it. A new segment
// starts every ns::kGramRestartEvery iterations: X = P X0 is formed and the
// Gram matrix re-formed from it, which bounds that growth for 3 s^2 l flops.
#include "kernels/cpu/NsScratch.h"
#include "kernels/NsForms.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace dmuon::kernels {
namespace {

// The s x l matrix and its layout: wide (s x l, ld l) or tall (l x s, ld s).
struct LongSide {
  bool tall;
  int s, l;

  // gram = X X^T (wide) or X^T X (tall), full.
  void gram(const float *x, float *gram) const {
    if (tall)
      cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, s, l, 1.0f, x, s, 0.0f, gram, s);
    else
      cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, s, l, 1.0f, x, l, 0.0f, gram, s);
    nsdetail::mirrorUpper(gram, s);
  }

  // dst = P X (wide) or X P^T (tall).
  void apply(const float *p, const float *x, float *dst) const {
    if (tall)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, l, s, s, 1.0f, x, s, p, s, 0.0f, dst,
                  s);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, l, s, 1.0f, p, s, x, l, 0.0f,
                  dst, l);
  }
};

// c = a b for s x s matrices.
void product(const float *a, const float *b, float *c, int s) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, s, s, 1.0f, a, s, b, s, 0.0f, c, s);
}

} // namespace

void nsGram(const float *in, float *out, int64_t rows, int64_t cols, int steps,
            NsCoefficients set, float *scratch) {
  const int64_t s = std::min(rows, cols);
  const int64_t l = std::max(rows, cols);
  const int64_t n = rows * cols;
  const LongSide side{rows > cols, static_cast<int>(s), static_cast<int>(l)};
  float *x0 = scratch;
  float *next = x0 + s * l; // X = P X0 at a restart
  float *gram = next + s * l;
  float *q = gram + s * s;
  float *p = q + s * s;
  float *tmp = p + s * s;
  const auto matrixBytes = static_cast<size_t>(s * s) * sizeof(float);

  const float inv = nsdetail::normalizationFactor(in, n, set);
  for (int64_t i = 0; i < n; ++i)
    x0[i] = in[i] * inv;

  const int segmentLength = ns::kGramRestartEvery > 0 ? ns::kGramRestartEvery : steps;
  for (int first = 0; first < steps; first += segmentLength) {
    const int end = std::min(steps, first + segmentLength);
    side.gram(x0, gram);
    for (int k = first; k < end; ++k) {
      float a, b, c;
      nsCoefficients(set, k, a, b, c);
      const auto S = static_cast<int>(s);
      cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, S, S, 1.0f, gram, S, 0.0f, tmp, S);
      nsdetail::polyUpper(q, tmp, gram, s, c, b, a); // Q = c A^2 + b A + a I
      if (k == first) {
        std::memcpy(p, q, matrixBytes);
      } else {
        product(q, p, tmp, S);
        std::swap(p, tmp);
      }
      if (k + 1 == end)
        break; // the next A comes from X = P X0, or is not needed
      cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, S, S, 1.0f, q, S, 0.0f, tmp, S);
      nsdetail::mirrorUpper(tmp, s);
      product(gram, tmp, q, S); // A Q^2 into Q's buffer: Q is done with
      nsdetail::symmetrize(q, s);
      std::swap(gram, q);
    }
    if (end == steps) {
      side.apply(p, x0, out); // x0 is scratch: fine when out aliases in
    } else {
      side.apply(p, x0, next);
      std::swap(x0, next);
    }
  }
}

} // namespace dmuon::kernels
