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
// The element-wise kernels (momentum, update, AdamW, casts) use explicitly
// rounded fp32 intrinsics (__fmul_rn, __fadd_rn, ...), which nvcc never
// contracts into FMAs, so they compute bit-for-bit what the CPU kernels
// compute (kernels/CMakeLists.txt builds both without FP contraction); the scalars (bias
// corrections, 1 - lr*wd, the lr scale) are computed on the host in double,
// exactly as kernels/cpu/MuonUpdate.cpp does.
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/NsWorkspace.h"

#include "kernels/LrScale.h"
#include "kernels/NsCoefficients.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <utility>

namespace dmuon::cuda {

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
};

namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = kNsNormThreads;
constexpr int64_t kMaxBlocks = 1 << 16;
static_assert(sizeof(__nv_bfloat16) == kBf16Bytes, "NsWorkspace.h sizes bf16 as 2 bytes");
// cuBLAS asks for 32 MiB on Hopper (4 MiB suffices before); one per context,
// reused by every GEMM on the stream.
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
// addSumOfSquares' partial sums: a fixed block count, so the result does not
// depend on the launch (the same bits every run).
constexpr int kSumOfSquaresBlocks = 256;

Result invalid(const std::string &what) { return Result{-1, what}; }

Result cudaFail(cudaError_t e, const char *what) {
  return Result{static_cast<int>(e),
                std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

Result blasFail(cublasStatus_t s, const char *what) {
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

// Makes `device` current for a scope and restores the previous one.
class DeviceGuard {
public:
  explicit DeviceGuard(int device) : device_(device) {
    error_ = cudaGetDevice(&previous_);
    if (error_ == cudaSuccess && previous_ != device_)
      error_ = cudaSetDevice(device_);
  }
  ~DeviceGuard() {
    if (error_ == cudaSuccess && previous_ != device_)
      cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;
  Result status() const {
    return error_ == cudaSuccess ? Result{} : cudaFail(error_, "selecting the CUDA device");
  }

private:
  int device_;
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

int blocksFor(int64_t n) {
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

// p <- p*decay - step*u.
__global__ void updateKernel(float *p, const float *u, float decay, float step, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(step, u[i]));
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

// ---------------------------------------------------------------------------
// Workspace

struct NsShape {
  int64_t batch, rows, cols;
  int64_t s, l;   // Gram side, long side
  bool tall;      // rows > cols
  int partials;   // norm partials per matrix
};

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

// The arena's buffers, at the offsets of NsWorkspace.h.
struct NsBuffers {
  float *u = nullptr; // muonStep's NS input/output (fp32, batch x rows x cols)
  bf16 *x = nullptr, *y = nullptr; // batch x s x l each
  bf16 *a = nullptr, *b = nullptr; // batch x s x s each
  double *partials = nullptr;      // batch x partials
  float *scales = nullptr;         // batch
};

NsArenaLayout nsLayout(const NsShape &sh, bool withU) {
  return nsArenaLayout(MatrixShape{sh.batch, sh.rows, sh.cols}, withU);
}

NsBuffers nsBuffers(const NsArenaLayout &at, bool withU, void *arena) {
  char *base = static_cast<char *>(arena);
  NsBuffers w;
  w.u = withU ? reinterpret_cast<float *>(base + at.u) : nullptr;
  w.x = reinterpret_cast<bf16 *>(base + at.x);
  w.y = reinterpret_cast<bf16 *>(base + at.y);
  w.a = reinterpret_cast<bf16 *>(base + at.a);
  w.b = reinterpret_cast<bf16 *>(base + at.b);
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
  const auto M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  if (batch == 1) {
    DMUON_BLAS_TRY(cublasGemmEx(ctx->blas, ta, tb, M, N, K, &alpha, a, CUDA_R_16BF,
                                static_cast<int>(lda), b, CUDA_R_16BF, static_cast<int>(ldb),
                                &beta, c, ctype, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
  } else {
    DMUON_BLAS_TRY(cublasGemmStridedBatchedEx(
                       ctx->blas, ta, tb, M, N, K, &alpha, a, CUDA_R_16BF, static_cast<int>(lda),
                       strideA, b, CUDA_R_16BF, static_cast<int>(ldb), strideB, &beta, c, ctype,
                       static_cast<int>(ldc), strideC, static_cast<int>(batch),
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmStridedBatchedEx");
  }
  return {};
}

// NS of `in` into `out` (fp32, batch x rows x cols) using the buffers `w`.
Result nsRun(Context *ctx, const float *in, float *out, const NsShape &sh, int steps,
             NsCoefficients set, const NsBuffers &w) {
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
  DMUON_RESULT_TRY(guard.status());
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
    if (guard.status().ok()) {
      cudaStreamSynchronize(ctx->stream);
      if (ctx->blas)
        cublasDestroy(ctx->blas);
      if (ctx->blasWorkspace)
        cudaFree(ctx->blasWorkspace);
      if (ctx->arena)
        cudaFree(ctx->arena);
      if (ctx->sumPartials)
        cudaFree(ctx->sumPartials);
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
  DMUON_RESULT_TRY(guard.status());
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
  DMUON_RESULT_TRY(guard.status());
  DMUON_CUDA_TRY(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize");
  DMUON_CUDA_TRY(cudaGetLastError(), "asynchronous CUDA error");
  return {};
}

Result newtonSchulz(Context *ctx, const float *in, float *out, int64_t batch, int64_t rows,
                    int64_t cols, int steps, NsCoefficients set) {
  DMUON_RESULT_TRY(checkShape(ctx, batch, rows, cols));
  if (steps < 0)
    return invalid("newtonSchulz: negative step count");
  if (batch == 0 || rows == 0 || cols == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(guard.status());
  const NsShape sh = nsShape(batch, rows, cols);
  const NsArenaLayout at = nsLayout(sh, false);
  DMUON_RESULT_TRY(ensureArena(ctx, at.bytes));
  const NsBuffers w = nsBuffers(at, false, ctx->arena);
  return nsRun(ctx, in, out, sh, steps, set, w);
}

Result muonStep(Context *ctx, float *param, float *momentum, const float *grad, int64_t batch,
                int64_t rows, int64_t cols, const MuonHyper &h) {
  DMUON_RESULT_TRY(checkShape(ctx, batch, rows, cols));
  if (h.nsSteps < 0)
    return invalid("muonStep: negative nsSteps");
  if (batch == 0 || rows == 0 || cols == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(guard.status());
  const NsShape sh = nsShape(batch, rows, cols);
  const NsArenaLayout at = nsLayout(sh, true);
  DMUON_RESULT_TRY(ensureArena(ctx, at.bytes));
  const NsBuffers w = nsBuffers(at, true, ctx->arena);
  const int64_t total = batch * rows * cols;

  momentumKernel<<<blocksFor(total), kThreads, 0, ctx->stream>>>(
      momentum, grad, w.u, h.momentum, gradWeight(h), h.nesterov, total);
  DMUON_LAUNCH_CHECK("launching the momentum kernel");
  DMUON_RESULT_TRY(nsRun(ctx, w.u, w.u, sh, h.nsSteps, h.coefficients, w));
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
  DMUON_RESULT_TRY(guard.status());
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
  DMUON_RESULT_TRY(guard.status());
  const auto decay =
      static_cast<float>(1.0 - static_cast<double>(h.lr) * static_cast<double>(h.weightDecay));
  const auto step =
      static_cast<float>(static_cast<double>(h.lr) * lrScale(rows, cols, h.matchRmsAdamW));
  updateKernel<<<blocksFor(n), kThreads, 0, ctx->stream>>>(param, ortho, decay, step, n);
  DMUON_LAUNCH_CHECK("launching the Muon update kernel");
  return {};
}

Result adamwStep(Context *ctx, float *param, float *m, float *v, const float *grad, int64_t n,
                 int64_t step, const AdamWHyper &h) {
  if (!ctx)
    return invalid("null dmuon::cuda::Context");
  if (n < 0)
    return invalid("adamwStep: negative size");
  if (n == 0)
    return {};
  DeviceGuard guard(ctx->device);
  DMUON_RESULT_TRY(guard.status());
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
  DMUON_RESULT_TRY(guard.status());
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
  DMUON_RESULT_TRY(guard.status());
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
  DMUON_RESULT_TRY(guard.status());
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
  DMUON_RESULT_TRY(guard.status());
  normPartialKernel<<<dim3(kSumOfSquaresBlocks, 1), kThreads, 0, ctx->stream>>>(
      x, n, 1, ctx->sumPartials);
  sumPartialsKernel<<<1, kThreads, 0, ctx->stream>>>(ctx->sumPartials, kSumOfSquaresBlocks, acc);
  DMUON_LAUNCH_CHECK("launching the sum-of-squares kernels");
  return {};
}

} // namespace dmuon::cuda
