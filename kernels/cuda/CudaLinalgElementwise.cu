// The element-wise kernels of the preconditioned rules on the GPU (see
// CudaLinearAlgebra.h): Adam's direction, the decayed add, the clamp, the
// row or column permutation and the column scaling. Explicitly rounded fp32
// intrinsics, which nvcc never contracts into FMAs, in the CPU kernels'
// order of operations (kernels/cpu/LinearAlgebra.cpp), so they compute the
// CPU's bits.
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaLinearAlgebra.h"

#include <string>

namespace dmuon::cuda {
namespace {

__global__ void adamDirectionKernel(float *out, const float *m, float *v, const float *g, int64_t n,
                                    float beta2, float take, float eps, float vScale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float vi = v[i];
    if (g) {
      const float gi = g[i];
      vi = __fadd_rn(__fmul_rn(beta2, vi), __fmul_rn(take, __fmul_rn(gi, gi)));
      v[i] = vi;
    }
    out[i] = __fdiv_rn(m[i], __fadd_rn(__fsqrt_rn(__fmul_rn(vi, vScale)), eps));
  }
}

__global__ void decayAddKernel(float *dst, const float *src, float keep, float take, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __fadd_rn(__fmul_rn(keep, dst[i]), __fmul_rn(take, src[i]));
}

__global__ void clampMagnitudeKernel(float *x, int64_t n, float bound) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float xi = x[i]; // comparisons, not fminf/fmaxf: those would turn a NaN into a bound
    if (xi > bound)
      x[i] = bound;
    else if (xi < -bound)
      x[i] = -bound;
  }
}

// out[r][c] = x[r][order[c]] (columns) or x[order[r]][c].
__global__ void permuteKernel(const float *x, float *out, int64_t rows, int64_t cols,
                              const int64_t *order, bool columns) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < rows * cols;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = p / cols, c = p % cols;
    out[p] = columns ? x[r * cols + order[c]] : x[order[r] * cols + c];
  }
}

__global__ void scaleColumnsKernel(float *x, int64_t rows, int64_t cols, const float *scales) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < rows * cols;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[p] = __fmul_rn(x[p], scales[p % cols]);
}

Result checkSizes(Context *ctx, const char *what, int64_t a, int64_t b = 0) {
  if (!ctx)
    return invalid(std::string(what) + ": null dmuon::cuda::Context");
  if (a < 0 || b < 0)
    return invalid(std::string(what) + ": negative size");
  return {};
}

} // namespace

Result adamDirection(Context *ctx, float *out, const float *m, float *v, const float *g, int64_t n,
                     float beta2, float eps, float vScale) {
  DMUON_RESULT_TRY(checkSizes(ctx, "adamDirection", n));
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  // 1 - beta2 in double, rounded once, as the CPU kernel.
  const auto take = static_cast<float>(1.0 - static_cast<double>(beta2));
  adamDirectionKernel<<<blocksFor(n), kThreads, 0, ctx->stream>>>(out, m, v, g, n, beta2, take, eps,
                                                                  vScale);
  DMUON_LAUNCH_CHECK("launching the Adam direction kernel");
  return {};
}

Result decayAdd(Context *ctx, float *dst, const float *src, float keep, float take, int64_t n) {
  DMUON_RESULT_TRY(checkSizes(ctx, "decayAdd", n));
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  decayAddKernel<<<blocksFor(n), kThreads, 0, ctx->stream>>>(dst, src, keep, take, n);
  DMUON_LAUNCH_CHECK("launching the decayed-add kernel");
  return {};
}

Result clampMagnitude(Context *ctx, float *x, int64_t n, float bound) {
  DMUON_RESULT_TRY(checkSizes(ctx, "clampMagnitude", n));
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  clampMagnitudeKernel<<<blocksFor(n), kThreads, 0, ctx->stream>>>(x, n, bound);
  DMUON_LAUNCH_CHECK("launching the clamp kernel");
  return {};
}

Result permute(Context *ctx, float *x, int64_t rows, int64_t cols, const int64_t *order,
               bool columns, float *scratch) {
  DMUON_RESULT_TRY(checkSizes(ctx, "permute", rows, cols));
  if (rows == 0 || cols == 0)
    return {};
  if (!order || !scratch)
    return invalid("permute: null order or scratch");
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  const int64_t entries = columns ? cols : rows;
  const void *deviceOrder = nullptr;
  DMUON_RESULT_TRY(
      stageHostArray(ctx, order, static_cast<size_t>(entries) * sizeof(int64_t), &deviceOrder));
  permuteKernel<<<blocksFor(rows * cols), kThreads, 0, ctx->stream>>>(
      x, scratch, rows, cols, static_cast<const int64_t *>(deviceOrder), columns);
  DMUON_LAUNCH_CHECK("launching the permute kernel");
  DMUON_CUDA_TRY(cudaMemcpyAsync(x, scratch, static_cast<size_t>(rows * cols) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, ctx->stream),
                 "cudaMemcpyAsync (permute)");
  return {};
}

Result scaleColumns(Context *ctx, float *x, int64_t rows, int64_t cols, const float *scales) {
  DMUON_RESULT_TRY(checkSizes(ctx, "scaleColumns", rows, cols));
  if (rows == 0 || cols == 0)
    return {};
  if (!scales)
    return invalid("scaleColumns: null scales");
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  const void *deviceScales = nullptr;
  DMUON_RESULT_TRY(
      stageHostArray(ctx, scales, static_cast<size_t>(cols) * sizeof(float), &deviceScales));
  scaleColumnsKernel<<<blocksFor(rows * cols), kThreads, 0, ctx->stream>>>(
      x, rows, cols, static_cast<const float *>(deviceScales));
  DMUON_LAUNCH_CHECK("launching the column-scaling kernel");
  return {};
}

} // namespace dmuon::cuda
