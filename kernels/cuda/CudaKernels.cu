// CUDA kernels of the optimizer step (see CudaKernels.h).
//
// Newton-Schulz on cuBLAS, bf16 operands with fp32 accumulation:
//
//   X = bf16(G * inv),  inv = 1 / (s * ||G||_F + 1e-7)   (norm in double,
//                                                           two deterministic passes)
//   repeat steps:  A = X X^T;  B = b A + c (A A);  X = a X + B X
//
// No transpose kernel: a row-major rows x cols buffer read column-major is
// its transpose. For a wide or square matrix (rows <= cols) that view is
// Xc = X^T (l x s, ld = l); for a tall one it is X itself (s x l, ld = s,
// with s = cols). Each case just picks the cuBLAS ops:
//
//               wide / square                      tall
//   A = X X^T   gemm(T,N, s,s,l; Xc,l; Xc,l)       gemm(N,T, s,s,l; X,s; X,s)
//   B           gemm(N,N, s,s,s; A,s; A,s)         (same), C preloaded with A, beta = b
//   X' = aX+BX  gemm(N,T, l,s,s; Xc,l; B,s)        gemm(N,N, s,l,s; B,s; X,s), C preloaded with X, beta = a
//
// and X' lands in the layout of `out` either way. Batches of 3-D tensors use
// the strided-batched GEMMs. The last iteration accumulates into the fp32
// `out` (preloaded with fp32(X)), so the result is not rounded to bf16 once
// more. All of it is stream-ordered on the caller's stream; nothing here
// synchronizes except a workspace that has to grow.
//
// For rectangular matrices the Gram form (CudaNsGram.cu) replaces the loop
// above after the same normalization and cast; kernels/NsForms.h says which
// form runs where. The element-wise kernels are in CudaElementwise.cu; what both files share
// (the Context, error helpers, the block sum and the norm's first pass) is in
// CudaCommon.cuh.
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaNs.cuh"

#include "kernels/LrScale.h"
#include "kernels/NsCoefficients.h"

#include <climits>
#include <cmath>
#include <string>
#include <utility>

namespace dmuon::cuda {
namespace {

// cuBLAS asks for 32 MiB on Hopper (4 MiB suffices before); one per context,
// reused by every GEMM on the stream.
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

// ---------------------------------------------------------------------------
// Kernels

// Second pass: scales[b] = 1 / (normScale * sqrt(sum of b's partials) + eps),
// the CPU's expression term by term.
__global__ void normFinalizeKernel(const double *partials, int count, int64_t batch,
                                   double normScale, double eps, float *scales) {
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x)
      acc += partials[b * count + i];
    const double sumSq = blockSum(acc);
    if (threadIdx.x == 0)
      scales[b] = static_cast<float>(
          __drcp_rn(__dadd_rn(__dmul_rn(normScale, __dsqrt_rn(sumSq)), eps)));
    __syncthreads();
  }
}

// x[b][i] = bf16(in[b][i] * scales[b]), round-to-nearest-even.
__global__ void scaleToBf16Kernel(const float *in, bf16 *x, int64_t n, int64_t batch,
                                  const float *scales) {
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const float s = scales[b];
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
      x[b * n + i] = __float2bfloat16_rn(__fmul_rn(in[b * n + i], s));
  }
}

// out[b][i] = in[b][i] * scales[b] (NS with zero iterations).
__global__ void scaleToF32Kernel(const float *in, float *out, int64_t n, int64_t batch,
                                 const float *scales) {
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const float s = scales[b];
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
      out[b * n + i] = __fmul_rn(in[b * n + i], s);
  }
}

__global__ void bf16ToF32Kernel(const bf16 *in, float *out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

// buf <- mu*buf + gw*g; u = nesterov ? gw*g + mu*buf : buf (gw: 1, or 1-mu
// for the EMA form).
__global__ void momentumKernel(float *buf, const float *g, float *u, float mu, float gw,
                               bool nesterov, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = __fmul_rn(gw, g[i]);
    const float b = __fadd_rn(__fmul_rn(mu, buf[i]), gi);
    buf[i] = b;
    u[i] = nesterov ? __fadd_rn(gi, __fmul_rn(mu, b)) : b;
  }
}

// p <- p*decay - step*u.
__global__ void updateKernel(float *p, const float *u, float decay, float step, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(step, u[i]));
}

// ---------------------------------------------------------------------------
// Workspace


NsShape nsShape(int64_t batch, int64_t rows, int64_t cols) {
  NsShape sh{};
  sh.batch = batch;
  sh.rows = rows;
  sh.cols = cols;
  sh.tall = rows > cols;
  sh.s = std::min(rows, cols);
  sh.l = std::max(rows, cols);
  sh.partials = nsNormPartials(rows * cols);
  return sh;
}


NsArenaLayout nsLayout(const NsShape &sh, bool withU, kernels::NsForm form) {
  return nsArenaLayout(MatrixShape{sh.batch, sh.rows, sh.cols}, withU, form);
}

NsBuffers nsBuffers(const NsArenaLayout &at, bool withU, void *arena) {
  char *base = static_cast<char *>(arena);
  NsBuffers w;
  w.u = withU ? reinterpret_cast<float *>(base + at.u) : nullptr;
  w.x = reinterpret_cast<bf16 *>(base + at.x);
  w.y = reinterpret_cast<bf16 *>(base + at.y);
  if (at.gram) {
    w.gram = reinterpret_cast<float *>(base + at.gram);
    w.q = reinterpret_cast<float *>(base + at.q);
    w.p = reinterpret_cast<float *>(base + at.p);
    w.product = reinterpret_cast<float *>(base + at.product);
  } else {
    w.a = reinterpret_cast<bf16 *>(base + at.a);
    w.b = reinterpret_cast<bf16 *>(base + at.b);
  }
  w.partials = reinterpret_cast<double *>(base + at.partials);
  w.scales = reinterpret_cast<float *>(base + at.scales);
  return w;
}

// Grows the arena to `bytes` (never shrinks). The old buffer may still be read
// by queued work, so the stream is drained before it is freed (and cudaFree
// synchronizes the device): reserveWorkspace sizes it up front so that no
// step grows it.
Result ensureArena(Context *ctx, size_t bytes) {
  if (bytes <= ctx->arenaBytes)
    return {};
  if (ctx->arena) {
    DMUON_CUDA_TRY(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize before growing the workspace");
    DMUON_CUDA_TRY(cudaFree(ctx->arena), "cudaFree (workspace)");
    ctx->arena = nullptr;
    ctx->arenaBytes = 0;
  }
  void *p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError(); // out-of-memory is not sticky; clear it
    return cudaFail(e, ("cudaMalloc of a " + std::to_string(bytes) + "-byte NS workspace").c_str());
  }
  ctx->arena = p;
  ctx->arenaBytes = bytes;
  return {};
}

Result checkShape(const Context *ctx, int64_t batch, int64_t rows, int64_t cols) {
  if (!ctx)
    return invalid("null dmuon::cuda::Context");
  if (batch < 0 || rows < 0 || cols < 0)
    return invalid("negative tensor size (batch " + std::to_string(batch) + ", rows " +
                   std::to_string(rows) + ", cols " + std::to_string(cols) + ")");
  if (rows > INT_MAX || cols > INT_MAX || batch > INT_MAX)
    return invalid("matrix side or batch beyond cuBLAS's int range (rows " +
                   std::to_string(rows) + ", cols " + std::to_string(cols) + ")");
  return {};
}

// ---------------------------------------------------------------------------
// GEMM: bf16 A and B, fp32 accumulation, C in `ctype` (bf16 or fp32).

Result gemm(Context *ctx, int64_t batch, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
            int64_t n, int64_t k, float alpha, const bf16 *a, int64_t lda, int64_t strideA,
            const bf16 *b, int64_t ldb, int64_t strideB, float beta, void *c,
            cudaDataType_t ctype, int64_t ldc, int64_t strideC) {
  return gemmEx(ctx, batch, ta, tb, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c,
                ldc, strideC, CUDA_R_16BF, ctype, CUBLAS_COMPUTE_32F);
}

// NS of `in` into `out` (fp32, batch x rows x cols) using the buffers `w`.
Result nsRun(Context *ctx, const float *in, float *out, const NsShape &sh, int steps,
             NsCoefficients set, kernels::NsForm form, const NsBuffers &w) {
  const bool pe = set == NsCoefficients::PolarExpress;
  const int64_t n = sh.rows * sh.cols;
  const int64_t total = sh.batch * n;
  const int64_t s = sh.s, l = sh.l;
  const int64_t batchY = std::min<int64_t>(sh.batch, 65535);

  normPartialKernel<<<dim3(static_cast<unsigned>(sh.partials), static_cast<unsigned>(batchY)),
                      kThreads, 0, ctx->stream>>>(in, n, sh.batch, w.partials);
  DMUON_LAUNCH_CHECK("launching the norm kernel");
  normFinalizeKernel<<<static_cast<unsigned>(batchY), kThreads, 0, ctx->stream>>>(
      w.partials, sh.partials, sh.batch, static_cast<double>(kernels::ns::normScale(pe)),
      kernels::ns::kNormEpsilon, w.scales);
  DMUON_LAUNCH_CHECK("launching the norm finalize kernel");

  const dim3 perMatrix(static_cast<unsigned>(std::min<int64_t>(blocksFor(n), 4096)),
                       static_cast<unsigned>(batchY));
  if (steps == 0) {
    scaleToF32Kernel<<<perMatrix, kThreads, 0, ctx->stream>>>(in, out, n, sh.batch, w.scales);
    DMUON_LAUNCH_CHECK("launching the NS scale kernel");
    return {};
  }
  scaleToBf16Kernel<<<perMatrix, kThreads, 0, ctx->stream>>>(in, w.x, n, sh.batch, w.scales);
  DMUON_LAUNCH_CHECK("launching the NS cast kernel");
  if (form == kernels::NsForm::Gram)
    return nsRunGram(ctx, out, sh, steps, set, w);

  const int64_t sl = s * l, ss = s * s;
  bf16 *x = w.x, *y = w.y;
  for (int k = 0; k < steps; ++k) {
    float a, b, c;
    kernels::ns::coefficients(pe, k, a, b, c);
    // A = X X^T
    if (sh.tall) {
      DMUON_RESULT_TRY(gemm(ctx, sh.batch, CUBLAS_OP_N, CUBLAS_OP_T, s, s, l, 1.0f, x, s, sl, x,
                            s, sl, 0.0f, w.a, CUDA_R_16BF, s, ss));
    } else {
      DMUON_RESULT_TRY(gemm(ctx, sh.batch, CUBLAS_OP_T, CUBLAS_OP_N, s, s, l, 1.0f, x, l, sl, x,
                            l, sl, 0.0f, w.a, CUDA_R_16BF, s, ss));
    }
    // B = c (A A) + b A
    DMUON_CUDA_TRY(cudaMemcpyAsync(w.b, w.a, static_cast<size_t>(sh.batch * ss) * sizeof(bf16),
                                   cudaMemcpyDeviceToDevice, ctx->stream),
                   "cudaMemcpyAsync (NS B <- A)");
    DMUON_RESULT_TRY(gemm(ctx, sh.batch, CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, c, w.a, s, ss, w.a, s,
                          ss, b, w.b, CUDA_R_16BF, s, ss));
    // X' = B X + a X, into fp32 `out` on the last iteration
    const bool last = k + 1 == steps;
    void *dst;
    cudaDataType_t dstType;
    if (last) {
      bf16ToF32Kernel<<<blocksFor(total), kThreads, 0, ctx->stream>>>(x, out, total);
      DMUON_LAUNCH_CHECK("launching the NS output kernel");
      dst = out;
      dstType = CUDA_R_32F;
    } else {
      DMUON_CUDA_TRY(cudaMemcpyAsync(y, x, static_cast<size_t>(sh.batch * sl) * sizeof(bf16),
                                     cudaMemcpyDeviceToDevice, ctx->stream),
                     "cudaMemcpyAsync (NS X' <- X)");
      dst = y;
      dstType = CUDA_R_16BF;
    }
    if (sh.tall) {
      DMUON_RESULT_TRY(gemm(ctx, sh.batch, CUBLAS_OP_N, CUBLAS_OP_N, s, l, s, 1.0f, w.b, s, ss, x,
                            s, sl, a, dst, dstType, s, sl));
    } else {
      DMUON_RESULT_TRY(gemm(ctx, sh.batch, CUBLAS_OP_N, CUBLAS_OP_T, l, s, s, 1.0f, x, l, sl, w.b,
                            s, ss, a, dst, dstType, l, sl));
    }
    std::swap(x, y);
  }
  return {};
}

using kernels::lrScale; // shared with the CPU kernels

// The gradient's weight in the momentum update, as the CPU kernel rounds it.
float gradWeight(const MuonHyper &h) {
  return h.emaMomentum ? static_cast<float>(1.0 - static_cast<double>(h.momentum)) : 1.0f;
}

} // namespace

// ---------------------------------------------------------------------------
// Public API

int deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

Result createContext(int device, void *stream, Context **out) {
  if (!out)
    return invalid("createContext: null output pointer");
  *out = nullptr;
  DeviceGuard guard(device);
  DMUON_RESULT_TRY(statusOf(guard));
  auto *ctx = new Context;
  ctx->device = device;
  ctx->stream = static_cast<cudaStream_t>(stream);
  auto fail = [&](Result r) {
    destroyContext(ctx);
    return r;
  };
  cublasStatus_t st = cublasCreate(&ctx->blas);
  if (st != CUBLAS_STATUS_SUCCESS) {
    ctx->blas = nullptr;
    return fail(blasFail(st, "cublasCreate"));
  }
  st = cublasSetStream(ctx->blas, ctx->stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    return fail(blasFail(st, "cublasSetStream"));
  // After cublasSetStream, which resets the workspace to cuBLAS's own pool.
  cudaError_t e = cudaMalloc(&ctx->blasWorkspace, kBlasWorkspaceBytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    ctx->blasWorkspace = nullptr;
    return fail(cudaFail(e, "cudaMalloc (cuBLAS workspace)"));
  }
  ctx->blasWorkspaceBytes = kBlasWorkspaceBytes;
  e = cudaMalloc(reinterpret_cast<void **>(&ctx->sumPartials), kSumOfSquaresBlocks * sizeof(double));
  if (e != cudaSuccess) {
    cudaGetLastError();
    ctx->sumPartials = nullptr;
    return fail(cudaFail(e, "cudaMalloc (sum-of-squares partials)"));
  }
  st = cublasSetWorkspace(ctx->blas, ctx->blasWorkspace, ctx->blasWorkspaceBytes);
  if (st != CUBLAS_STATUS_SUCCESS)
    return fail(blasFail(st, "cublasSetWorkspace"));
  *out = ctx;
  return {};
}

void destroyContext(Context *ctx) {
  if (!ctx)
    return;
  {
    DeviceGuard guard(ctx->device);
    if (statusOf(guard).ok()) {
      cudaStreamSynchronize(ctx->stream);
      if (ctx->blas)
        cublasDestroy(ctx->blas);
      if (ctx->blasWorkspace)
        cudaFree(ctx->blasWorkspace);
      if (ctx->arena)
        cudaFree(ctx->arena);
      if (ctx->sumPartials)
        cudaFree(ctx->sumPartials);
      destroyLinalg(ctx);
      cudaGetLastError();
    }
  }
  delete ctx;
}

Result reserveWorkspace(Context *ctx, int64_t batch, int64_t rows, int64_t cols) {
  DMUON_RESULT_TRY(checkShape(ctx, batch, rows, cols));
  if (batch == 0 || rows == 0 || cols == 0)
    return {};
  const MatrixShape shape{batch, rows, cols};
  return reserveWorkspace(ctx, &shape, 1);
}

Result reserveWorkspace(Context *ctx, const MatrixShape *shapes, size_t count) {
  if (!ctx)
    return invalid("null dmuon::cuda::Context");
  for (size_t i = 0; i < count; ++i)
    DMUON_RESULT_TRY(checkShape(ctx, shapes[i].batch, shapes[i].rows, shapes[i].cols));
  const size_t bytes = nsArenaBytesFor(shapes, count);
  if (bytes == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  return ensureArena(ctx, bytes);
}

int64_t workspaceBytes(const Context *ctx) {
  if (!ctx)
    return 0;
  return static_cast<int64_t>(ctx->arenaBytes + ctx->blasWorkspaceBytes);
}

Result synchronize(Context *ctx) {
  if (!ctx)
    return invalid("null dmuon::cuda::Context");
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  DMUON_CUDA_TRY(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize");
  DMUON_CUDA_TRY(cudaGetLastError(), "asynchronous CUDA error");
  return {};
}

Result newtonSchulz(Context *ctx, const float *in, float *out, int64_t batch, int64_t rows,
                    int64_t cols, int steps, NsCoefficients set, kernels::NsForm form) {
  DMUON_RESULT_TRY(checkShape(ctx, batch, rows, cols));
  if (steps < 0)
    return invalid("newtonSchulz: negative step count");
  if (batch == 0 || rows == 0 || cols == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  const NsShape sh = nsShape(batch, rows, cols);
  const kernels::NsForm run = gpuNsForm(form, rows, cols);
  const NsArenaLayout at = nsLayout(sh, false, run);
  DMUON_RESULT_TRY(ensureArena(ctx, at.bytes));
  const NsBuffers w = nsBuffers(at, false, ctx->arena);
  return nsRun(ctx, in, out, sh, steps, set, run, w);
}

Result muonStep(Context *ctx, float *param, float *momentum, const float *grad, int64_t batch,
                int64_t rows, int64_t cols, const MuonHyper &h) {
  DMUON_RESULT_TRY(checkShape(ctx, batch, rows, cols));
  if (h.nsSteps < 0)
    return invalid("muonStep: negative nsSteps");
  if (batch == 0 || rows == 0 || cols == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  const NsShape sh = nsShape(batch, rows, cols);
  const kernels::NsForm run = gpuNsForm(h.nsForm, rows, cols);
  const NsArenaLayout at = nsLayout(sh, true, run);
  DMUON_RESULT_TRY(ensureArena(ctx, at.bytes));
  const NsBuffers w = nsBuffers(at, true, ctx->arena);
  const int64_t total = batch * rows * cols;

  momentumKernel<<<blocksFor(total), kThreads, 0, ctx->stream>>>(
      momentum, grad, w.u, h.momentum, gradWeight(h), h.nesterov, total);
  DMUON_LAUNCH_CHECK("launching the momentum kernel");
  DMUON_RESULT_TRY(nsRun(ctx, w.u, w.u, sh, h.nsSteps, h.coefficients, run, w));
  const auto decay =
      static_cast<float>(1.0 - static_cast<double>(h.lr) * static_cast<double>(h.weightDecay));
  const auto step =
      static_cast<float>(static_cast<double>(h.lr) * lrScale(rows, cols, h.matchRmsAdamW));
  updateKernel<<<blocksFor(total), kThreads, 0, ctx->stream>>>(param, w.u, decay, step, total);
  DMUON_LAUNCH_CHECK("launching the Muon update kernel");
  return {};
}

Result muonMomentum(Context *ctx, float *momentum, const float *grad, float *u, int64_t n,
                    const MuonHyper &h) {
  if (!ctx)
    return invalid("muonMomentum: null context");
  if (n <= 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  momentumKernel<<<blocksFor(n), kThreads, 0, ctx->stream>>>(momentum, grad, u, h.momentum,
                                                              gradWeight(h), h.nesterov, n);
  DMUON_LAUNCH_CHECK("launching the momentum kernel");
  return {};
}

Result muonApply(Context *ctx, float *param, const float *ortho, int64_t n, int64_t rows,
                 int64_t cols, const MuonHyper &h) {
  if (!ctx)
    return invalid("muonApply: null context");
  if (n <= 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(statusOf(guard));
  const auto decay =
      static_cast<float>(1.0 - static_cast<double>(h.lr) * static_cast<double>(h.weightDecay));
  const auto step =
      static_cast<float>(static_cast<double>(h.lr) * lrScale(rows, cols, h.matchRmsAdamW));
  updateKernel<<<blocksFor(n), kThreads, 0, ctx->stream>>>(param, ortho, decay, step, n);
  DMUON_LAUNCH_CHECK("launching the Muon update kernel");
  return {};
}

} // namespace dmuon::cuda
