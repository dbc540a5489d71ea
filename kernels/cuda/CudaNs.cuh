// What the Newton-Schulz forms' files share (CudaKernels.cu: the three-GEMM
// form and the entry points; CudaNsGram.cu: the Gram form): a problem's
// shape, the arena's buffers, and one cuBLAS GEMM call for single and
// strided-batched matrices. Internal to kernels/cuda.
#ifndef DMUON_KERNELS_CUDA_CUDANS_CUH
#define DMUON_KERNELS_CUDA_CUDANS_CUH

#include "kernels/cuda/CudaCommon.cuh"

namespace dmuon::cuda {

struct NsShape {
  int64_t batch, rows, cols;
  int64_t s, l;   // Gram side, long side
  bool tall;      // rows > cols
  int partials;   // norm partials per matrix
};

// The arena's buffers, at the offsets of NsWorkspace.h (null where the
// layout has none).
struct NsBuffers {
  float *u = nullptr;              // muonStep's NS input/output (fp32, batch x rows x cols)
  __nv_bfloat16 *x = nullptr, *y = nullptr; // batch x s x l each
  __nv_bfloat16 *a = nullptr, *b = nullptr; // batch x s x s each (three-GEMM form)
  float *gram = nullptr, *q = nullptr, *p = nullptr, *product = nullptr; // Gram form, s x s
  double *partials = nullptr;      // batch x partials
  float *scales = nullptr;         // batch
};

// The Gram form of NS into `out` (fp32, batch x rows x cols) from the
// normalized bf16 X0 in `w.x` (CudaNsGram.cu). steps > 0.
Result nsRunGram(Context *ctx, float *out, const NsShape &sh, int steps, NsCoefficients set,
                 const NsBuffers &w);

namespace {

// C = alpha op(A) op(B) + beta C, column-major, for one matrix or a
// strided batch; A and B of `abType`, C of `ctype`, accumulated as `compute`.
inline Result gemmEx(Context *ctx, int64_t batch, cublasOperation_t ta, cublasOperation_t tb,
                     int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                     int64_t strideA, const void *b, int64_t ldb, int64_t strideB, float beta,
                     void *c, int64_t ldc, int64_t strideC, cudaDataType_t abType,
                     cudaDataType_t ctype, cublasComputeType_t compute) {
  const auto M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  if (batch == 1) {
    DMUON_BLAS_TRY(cublasGemmEx(ctx->blas, ta, tb, M, N, K, &alpha, a, abType,
                                static_cast<int>(lda), b, abType, static_cast<int>(ldb), &beta, c,
                                ctype, static_cast<int>(ldc), compute, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
  } else {
    DMUON_BLAS_TRY(cublasGemmStridedBatchedEx(
                       ctx->blas, ta, tb, M, N, K, &alpha, a, abType, static_cast<int>(lda),
                       strideA, b, abType, static_cast<int>(ldb), strideB, &beta, c, ctype,
                       static_cast<int>(ldc), strideC, static_cast<int>(batch), compute,
                       CUBLAS_GEMM_DEFAULT),
                   "cublasGemmStridedBatchedEx");
  }
  return {};
}

} // namespace
} // namespace dmuon::cuda

#endif
