// The symmetric form of Newton-Schulz: the same iteration as the three-GEMM
// reference, with SYRK for its two symmetric products.
//
// X = G / (s ||G||_F + 1e-7), kept in G's own layout (no transposes: a tall
// matrix iterates X <- X (aI + B) with A = X^T X, which is the transposed
// iteration written from the other side)
// repeat steps:  A = X X^T        SYRK, upper triangle, mirrored
//                A2 = A A^T       SYRK (A is symmetric, so this is A^2)
//                B = aI + bA + cA2
//                X = B X          one GEMM; aI inside B saves the pass
//                                 that would preload the destination with X
//
// Per iteration 3 s^2 l + s^3 flops against the reference's 4 s^2 l + 2 s^3;
// the mirrors and the polynomial are O(s^2).
#include "kernels/cpu/NsScratch.h"

#include <cblas.h>

#include <algorithm>
#include <utility>

namespace dmuon::kernels {

void nsSymmetric(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                 NsCoefficients set, float *scratch) {
  const bool tall = rows > cols;
  const int64_t s = std::min(rows, cols);
  const int64_t l = std::max(rows, cols);
  const int64_t n = rows * cols;
  float *x = scratch;
  float *y = x + s * l;
  float *gram = y + s * l;
  float *poly = gram + s * s;

  const float inv = nsdetail::normalizationFactor(in, n, set);
  for (int64_t i = 0; i < n; ++i)
    x[i] = in[i] * inv;

  const auto S = static_cast<int>(s);
  const auto L = static_cast<int>(l);
  for (int k = 0; k < steps; ++k) {
    float a, b, c;
    nsCoefficients(set, k, a, b, c);
    if (tall) // A = X^T X (X is l x s)
      cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, S, L, 1.0f, x, S, 0.0f, gram, S);
    else // A = X X^T (X is s x l)
      cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, S, L, 1.0f, x, L, 0.0f, gram, S);
    nsdetail::mirrorUpper(gram, s); // the next SYRK reads all of A
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, S, S, 1.0f, gram, S, 0.0f, poly, S);
    nsdetail::polyUpper(poly, poly, gram, s, c, b, a); // B = c A^2 + b A + a I
    // The source is always scratch, so the last iteration may write `out`
    // even when it aliases `in`.
    float *dst = k + 1 == steps ? out : y;
    if (tall) // X' = X B
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, S, S, 1.0f, x, S, poly, S, 0.0f,
                  dst, S);
    else // X' = B X
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, L, S, 1.0f, poly, S, x, L, 0.0f,
                  dst, L);
    std::swap(x, y);
  }
}

} // namespace dmuon::kernels
