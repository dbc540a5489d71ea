// Dense linear algebra on the host for the preconditioned rules (SOAP,
// Shampoo: optim/Preconditioned.h): GEMM on OpenBLAS, the symmetric
// eigendecomposition and the QR factorization on its LAPACK. Row-major fp32
// throughout, as every kernel here.
#ifndef DMUON_KERNELS_CPU_LINEARALGEBRA_H
#define DMUON_KERNELS_CPU_LINEARALGEBRA_H

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon::kernels {

// LAPACK's scratch, grown once to the largest matrix and reused.
struct LinalgWorkspace {
  std::vector<float> work, tau, columnMajor;
  std::vector<int> iwork;
};

// c <- alpha * op(a) * op(b) + beta * c, op(x) = x^T when trans*; op(a) is
// m x k, op(b) k x n, c m x n.
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
          const float *b, float beta, float *c);

// `a` (n x n, symmetric) <- its eigenvectors as columns, by descending
// eigenvalue; `values` <- the eigenvalues, descending. Empty on success,
// else what LAPACK reported.
std::string symmetricEigen(float *a, float *values, int64_t n, LinalgWorkspace &ws);

// `a` (n x n) <- the Q of its Householder QR factorization (a = QR).
std::string orthonormalize(float *a, int64_t n, LinalgWorkspace &ws);

// out[i] = m[i] / (sqrt(v[i] * vScale) + eps), first updating
// v[i] = beta2 * v[i] + (1 - beta2) * g[i]^2 when `g` is given: Adam's
// direction from its moments (SOAP in the rotated basis, Shampoo's graft).
void adamDirection(float *out, const float *m, float *v, const float *g, int64_t n, float beta2,
                   float eps, float vScale);

// dst[i] = keep * dst[i] + take * src[i].
void decayAdd(float *dst, const float *src, float keep, float take, int64_t n);

// x[i] clamped to [-bound, bound]; a NaN stays NaN (the step's finite check
// must still see it).
void clampMagnitude(float *x, int64_t n, float bound);

// x (rows x cols) with its rows (or its columns) reordered: new row r is old
// row order[r]. `scratch` holds rows * cols floats.
void permute(float *x, int64_t rows, int64_t cols, const int64_t *order, bool columns,
             float *scratch);

// x (rows x cols) with column c multiplied by scales[c].
void scaleColumns(float *x, int64_t rows, int64_t cols, const float *scales);

} // namespace dmuon::kernels

#endif
