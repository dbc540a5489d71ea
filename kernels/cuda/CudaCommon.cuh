// What the CUDA kernels' two files (CudaKernels.cu: Newton-Schulz and the
// Muon step; CudaElementwise.cu: the element-wise kernels) share: the
// Context, the error helpers, the device guard, the deterministic block sum
// and the norm's first pass. Internal to kernels/cuda; everything but the
// Context is in an anonymous namespace, so each file has its own copy.
#ifndef DMUON_KERNELS_CUDA_CUDACOMMON_CUH
#define DMUON_KERNELS_CUDA_CUDACOMMON_CUH

#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/DeviceGuard.h"
#include "kernels/cuda/NsWorkspace.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

namespace dmuon::cuda {

// The preconditioned rules' cuSOLVER handle and scratch (CudaLinearAlgebra.cu),
// made at their first use: a Muon-only run never creates them.
struct LinalgState;

class Context {
public:
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  void *blasWorkspace = nullptr;
  size_t blasWorkspaceBytes = 0;
  void *arena = nullptr; // NS / Muon scratch
  size_t arenaBytes = 0;
  // addSumOfSquares' partial sums, reused in stream order by every call (an
  // allocation per call would go through a memory pool each time).
  double *sumPartials = nullptr;
  LinalgState *linalg = nullptr;
};

// Frees the context's LinalgState (destroyContext, on the context's device,
// after its stream is drained).
void destroyLinalg(Context *ctx);
// Copies `bytes` of host memory to a device buffer of the context's, in
// stream order, through pinned staging (the caller may reuse its memory at
// once); *device is valid for the kernels enqueued before the next call.
Result stageHostArray(Context *ctx, const void *host, size_t bytes, const void **device);

namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = kNsNormThreads;
constexpr int64_t kMaxBlocks = 1 << 16;
static_assert(sizeof(__nv_bfloat16) == kBf16Bytes, "NsWorkspace.h sizes bf16 as 2 bytes");
// addSumOfSquares' partial sums: a fixed block count, so the result does not
// depend on the launch (the same bits every run).
constexpr int kSumOfSquaresBlocks = 256;

inline Result invalid(const std::string &what) { return Result{-1, what}; }

inline Result cudaFail(cudaError_t e, const char *what) {
  return Result{static_cast<int>(e),
                std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

inline Result blasFail(cublasStatus_t s, const char *what) {
  return Result{static_cast<int>(s), std::string(what) + ": " + cublasGetStatusName(s) + ": " +
                                         cublasGetStatusString(s)};
}

#define DMUON_CUDA_TRY(expr, what)                                                                 \
  do {                                                                                             \
    const cudaError_t dmuonErr_ = (expr);                                                          \
    if (dmuonErr_ != cudaSuccess)                                                                  \
      return cudaFail(dmuonErr_, what);                                                            \
  } while (0)

#define DMUON_BLAS_TRY(expr, what)                                                                 \
  do {                                                                                             \
    const cublasStatus_t dmuonStatus_ = (expr);                                                    \
    if (dmuonStatus_ != CUBLAS_STATUS_SUCCESS)                                                     \
      return blasFail(dmuonStatus_, what);                                                         \
  } while (0)

// A kernel launch's configuration error, if any.
#define DMUON_LAUNCH_CHECK(what) DMUON_CUDA_TRY(cudaGetLastError(), what)

#define DMUON_RESULT_TRY(expr)                                                                     \
  do {                                                                                             \
    Result dmuonRes_ = (expr);                                                                     \
    if (!dmuonRes_.ok())                                                                           \
      return dmuonRes_;                                                                            \
  } while (0)

// A DeviceGuard's failure as the kernels report it.
inline Result statusOf(const DeviceGuard &guard) {
  return guard.error() == cudaSuccess ? Result{}
                                      : cudaFail(guard.error(), "selecting the CUDA device");
}

inline int blocksFor(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// ---------------------------------------------------------------------------
// Kernels

// Deterministic block sum (fixed blockDim = kThreads): warp shuffles, then
// the warp sums through shared memory. The result is valid in thread 0.
__device__ double blockSum(double v) {
  __shared__ double warpSums[kThreads / 32];
  for (int off = 16; off > 0; off /= 2)
    v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0)
    warpSums[warp] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w)
      total += warpSums[w];
  return total;
}

// First pass of ||x_b||^2: block (i, b) sums its grid-stride share of matrix b
// into partials[b * gridDim.x + i].
__global__ void normPartialKernel(const float *x, int64_t n, int64_t batch, double *partials) {
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const float *m = x + b * n;
    double acc = 0.0;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const double v = m[i];
      acc += v * v;
    }
    const double total = blockSum(acc);
    if (threadIdx.x == 0)
      partials[b * gridDim.x + blockIdx.x] = total;
    __syncthreads(); // warpSums is reused by the next b
  }
}


} // namespace
} // namespace dmuon::cuda

#endif
