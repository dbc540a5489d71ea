// The preconditioned rules' linear algebra on the GPU (SOAP, Shampoo:
// runtime/optim/Preconditioned.h), with the semantics of the CPU kernels
// (kernels/cpu/LinearAlgebra.h): GEMM on cuBLAS, the symmetric
// eigendecomposition and the QR factorization on cuSOLVER, and the
// element-wise kernels. Row-major fp32 device memory unless a pointer is
// said to be the host's; everything is enqueued on the context's stream.
// Plain C++ interface, as CudaKernels.h.
#ifndef DMUON_KERNELS_CUDA_CUDALINEARALGEBRA_H
#define DMUON_KERNELS_CUDA_CUDALINEARALGEBRA_H

#include "kernels/cuda/CudaKernels.h"

#include <cstdint>

namespace dmuon::cuda {

// Sizes the cuSOLVER handle's workspaces and the staging of host arrays for
// square matrices up to maxSide x maxSide, so that no step allocates (each
// call below grows them on demand otherwise, which synchronizes the
// stream). Creates the cuSOLVER handle on first use.
Result reserveLinearAlgebra(Context *ctx, int64_t maxSide);

// c <- alpha * op(a) * op(b) + beta * c; op(a) is m x k, op(b) k x n, c m x n.
// Full fp32 (no TF32), as the CPU's sgemm.
Result gemm(Context *ctx, bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
            const float *a, const float *b, float beta, float *c);

// `a` (n x n, symmetric) <- its eigenvectors as columns, by descending
// eigenvalue; `values` (device, n) <- the eigenvalues, descending.
// Synchronizes the stream to read cuSOLVER's info.
Result symmetricEigen(Context *ctx, float *a, float *values, int64_t n);

// `a` (n x n) <- the Q of its Householder QR factorization (LAPACK's
// geqrf + orgqr convention, as the CPU's). Synchronizes to read the info.
Result orthonormalize(Context *ctx, float *a, int64_t n);

// out[i] = m[i] / (sqrt(v[i] * vScale) + eps), first updating
// v[i] = beta2 * v[i] + (1 - beta2) * g[i]^2 when `g` is not null; `out`
// may be `g`. The CPU's roundings, so the same bits.
Result adamDirection(Context *ctx, float *out, const float *m, float *v, const float *g, int64_t n,
                     float beta2, float eps, float vScale);

// dst[i] = keep * dst[i] + take * src[i].
Result decayAdd(Context *ctx, float *dst, const float *src, float keep, float take, int64_t n);

// x[i] clamped to [-bound, bound]; a NaN stays NaN.
Result clampMagnitude(Context *ctx, float *x, int64_t n, float bound);

// x (rows x cols) with its rows (or columns) reordered: new row r is old row
// order[r]; `order` is host memory (rows or cols entries), `scratch` holds
// rows * cols device floats.
Result permute(Context *ctx, float *x, int64_t rows, int64_t cols, const int64_t *order,
               bool columns, float *scratch);

// x (rows x cols) with column c multiplied by scales[c] (host memory).
Result scaleColumns(Context *ctx, float *x, int64_t rows, int64_t cols, const float *scales);

} // namespace dmuon::cuda

#endif
