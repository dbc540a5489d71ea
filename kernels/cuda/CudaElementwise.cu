// CUDA kernels of the optimizer step (see CudaKernels.h): the element-wise
// ones (AdamW, casts, scaled copies and adds, the sum of squares).
//
// They, and the Muon momentum and update kernels in CudaKernels.cu, use
// explicitly rounded fp32 intrinsics (__fmul_rn, __fadd_rn, ...), which nvcc
// never contracts into FMAs, so they compute bit for bit what the CPU kernels
// compute (kernels/CMakeLists.txt builds both without FP contraction); the
// scalars (bias corrections, 1 - lr*wd, the lr scale) are computed on the
// host in double, exactly as kernels/cpu/MuonUpdate.cpp does.
#include "kernels/cuda/CudaCommon.cuh"

#include <cmath>

namespace dmuon::cuda {
namespace {

__global__ void f32ToBf16Kernel(const float *in, bf16 *out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void scaleCopyKernel(float *dst, const float *src, float scale, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __fmul_rn(src[i], scale);
}

// dst <- dst + scale*src.
__global__ void scaleAddKernel(float *dst, const float *src, float scale, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __fadd_rn(dst[i], __fmul_rn(src[i], scale));
}

// *acc += the sum of `count` partials, in index order per thread and a fixed
// tree across threads.
__global__ void sumPartialsKernel(const double *partials, int count, double *acc) {
  double part = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x)
    part += partials[i];
  const double total = blockSum(part);
  if (threadIdx.x == 0)
    *acc += total;
}

struct AdamWScalars {
  float b1, b2, ob1, ob2, eps, stepSize, bc2Sqrt, decay;
};

// kernels/cpu/MuonUpdate.cpp adamwStep, operation for operation.
__global__ void adamwKernel(float *param, float *m, float *v, const float *grad, int64_t n,
                            AdamWScalars k) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i];
    const float mi = __fadd_rn(__fmul_rn(k.b1, m[i]), __fmul_rn(k.ob1, g));
    const float vi = __fadd_rn(__fmul_rn(k.b2, v[i]), __fmul_rn(k.ob2, __fmul_rn(g, g)));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2Sqrt), k.eps);
    param[i] = __fsub_rn(__fmul_rn(param[i], k.decay), __fmul_rn(k.stepSize, __fdiv_rn(mi, denom)));
  }
}

} // namespace

Result adamwStep(Context *ctx, float *param, float *m, float *v, const float *grad, int64_t n,
                 int64_t step, const AdamWHyper &h) {
  if (!ctx)
    return invalid("null dmuon::cuda::Context");
  if (n < 0)
    return invalid("adamwStep: negative size");
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  // Host scalars exactly as kernels/cpu/MuonUpdate.cpp computes them.
  const auto t = static_cast<double>(std::max<int64_t>(step, 1));
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), t);
  AdamWScalars k{};
  k.stepSize = static_cast<float>(static_cast<double>(h.lr) / bc1);
  k.bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  k.decay =
      static_cast<float>(1.0 - static_cast<double>(h.lr) * static_cast<double>(h.weightDecay));
  k.b1 = h.beta1;
  k.b2 = h.beta2;
  k.ob1 = static_cast<float>(1.0 - static_cast<double>(h.beta1));
  k.ob2 = static_cast<float>(1.0 - static_cast<double>(h.beta2));
  k.eps = h.eps;
  adamwKernel<<<blocksFor(n), kThreads, 0, ctx->stream>>>(param, m, v, grad, n, k);
  DMUON_LAUNCH_CHECK("launching the AdamW kernel");
  return {};
}

Result packCast(Context *ctx, void *dst, PackedType type, const float *src, int64_t n) {
  if (!ctx)
    return invalid("null dmuon::cuda::Context");
  if (n < 0)
    return invalid("packCast: negative size");
  if (type != PackedType::F32 && type != PackedType::BF16)
    return invalid("packCast: unknown packed type " + std::to_string(static_cast<int>(type)));
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  if (type == PackedType::F32) {
    if (dst != src)
      DMUON_CUDA_TRY(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, ctx->stream),
                     "cudaMemcpyAsync (packCast f32)");
    return {};
  }
  f32ToBf16Kernel<<<blocksFor(n), kThreads, 0, ctx->stream>>>(src, static_cast<bf16 *>(dst), n);
  DMUON_LAUNCH_CHECK("launching the bf16 pack kernel");
  return {};
}

Result scaleCopy(Context *ctx, float *dst, const float *src, float scale, int64_t n) {
  if (!ctx)
    return invalid("null dmuon::cuda::Context");
  if (n < 0)
    return invalid("scaleCopy: negative size");
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  scaleCopyKernel<<<blocksFor(n), kThreads, 0, ctx->stream>>>(dst, src, scale, n);
  DMUON_LAUNCH_CHECK("launching the scale-copy kernel");
  return {};
}

Result scaleAdd(Context *ctx, float *dst, const float *src, float scale, int64_t n) {
  if (!ctx)
    return invalid("null dmuon::cuda::Context");
  if (n < 0)
    return invalid("scaleAdd: negative size");
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  scaleAddKernel<<<blocksFor(n), kThreads, 0, ctx->stream>>>(dst, src, scale, n);
  DMUON_LAUNCH_CHECK("launching the scale-add kernel");
  return {};
}

Result addSumOfSquares(Context *ctx, const float *x, int64_t n, double *acc) {
  if (!ctx || !acc)
    return invalid("addSumOfSquares: null context or accumulator");
  if (n < 0)
    return invalid("addSumOfSquares: negative size");
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  normPartialKernel<<<dim3(kSumOfSquaresBlocks, 1), kThreads, 0, ctx->stream>>>(
      x, n, 1, ctx->sumPartials);
  sumPartialsKernel<<<1, kThreads, 0, ctx->stream>>>(ctx->sumPartials, kSumOfSquaresBlocks, acc);
  DMUON_LAUNCH_CHECK("launching the sum-of-squares kernels");
  return {};
}

} // namespace dmuon::cuda
