// NorMuon's per-row normalization of an orthogonalized update on the GPU
// (the CPU kernel's semantics, kernels/cpu/MuonKernels.h): one block per
// matrix walks its rows twice, first for each row's mean square (updating
// the second moment and the norms before and after), then to scale. Sums in
// double, in a fixed order, so a run repeats bit for bit.
#include "kernels/cuda/CudaCommon.cuh"

namespace dmuon::cuda {
namespace {

__global__ void normuonKernel(float *o, float *v, int64_t batch, int64_t rows, int64_t cols,
                              float keep, float take) {
  __shared__ double keepNorm;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    float *m = o + b * rows * cols;
    float *vb = v + b * rows;
    double before = 0.0, after = 0.0; // valid in thread 0
    for (int64_t r = 0; r < rows; ++r) {
      double part = 0.0;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const double x = m[r * cols + c];
        part += x * x;
      }
      const double squares = blockSum(part);
      __syncthreads(); // blockSum's shared sums are reused by the next row
      if (threadIdx.x == 0) {
        const float mean = static_cast<float>(squares / static_cast<double>(cols));
        vb[r] = __fadd_rn(__fmul_rn(keep, vb[r]), __fmul_rn(take, mean));
        const double scale = 1.0 / (sqrt(static_cast<double>(vb[r])) + 1e-10);
        before += squares;
        after += squares * scale * scale;
      }
    }
    if (threadIdx.x == 0)
      keepNorm = sqrt(before) / (sqrt(after) + 1e-10);
    __syncthreads();
    for (int64_t r = 0; r < rows; ++r) {
      const float s = static_cast<float>(keepNorm / (sqrt(static_cast<double>(vb[r])) + 1e-10));
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        m[r * cols + c] = __fmul_rn(m[r * cols + c], s);
    }
    __syncthreads(); // keepNorm is the next matrix's
  }
}

} // namespace

Result normuonNormalize(Context *ctx, float *o, float *v, int64_t batch, int64_t rows,
                        int64_t cols, float beta2) {
  if (!ctx)
    return invalid("normuonNormalize: null context");
  if (batch <= 0 || rows <= 0 || cols <= 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  const auto take = static_cast<float>(1.0 - static_cast<double>(beta2));
  const int blocks = static_cast<int>(std::min<int64_t>(batch, 65535));
  normuonKernel<<<blocks, kThreads, 0, ctx->stream>>>(o, v, batch, rows, cols, beta2, take);
  DMUON_LAUNCH_CHECK("launching the NorMuon normalization kernel");
  return {};
}

} // namespace dmuon::cuda
