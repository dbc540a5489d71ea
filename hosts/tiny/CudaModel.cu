// tiny::CudaModel: TinyModel.cpp's forward and backward on the GPU. The
// comments name the CPU code each piece mirrors; the row-wise reductions
// accumulate in double as the CPU does, and the column sums (bias and norm
// gradients) add rows in the CPU's order, so the two agree to float rounding
// of the GEMMs.
#include "CudaModel.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tiny {
namespace {

constexpr float kRmsEps = 1e-6f; // as TinyModel.cpp
constexpr int kThreads = 256;    // element-wise and column kernels
constexpr int kRowThreads = 128; // one block per row (power of two)

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CudaModel: ") + what + " failed: " + cudaGetErrorName(e) +
                             ": " + cudaGetErrorString(e));
}

void check(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("CudaModel: ") + what + " failed: " +
                             cublasGetStatusName(s) + ": " + cublasGetStatusString(s));
}

void launched(const char *kernel) { check(cudaGetLastError(), kernel); }

unsigned gridFor(int64_t n) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)));
}

struct LayerNames {
  std::string norm, fc1w, fc1b, fc2w, fc2b;
};

LayerNames layerNames(int64_t l) {
  std::string p = "layers." + std::to_string(l) + ".";
  return {p + "norm.weight", p + "fc1.weight", p + "fc1.bias", p + "fc2.weight", p + "fc2.bias"};
}

// ---------------------------------------------------------------- kernels

__device__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// Sum of v over the block (blockDim.x == kRowThreads), returned to every thread.
__device__ double blockSum(double v) {
  __shared__ double s[kRowThreads];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int k = kRowThreads / 2; k > 0; k >>= 1) {
    if (static_cast<int>(threadIdx.x) < k)
      s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  double total = s[0];
  __syncthreads(); // s is reused by the next call
  return total;
}

// n = rmsnorm(h) ⊙ g, r = 1/rms per row. One block per row.
__global__ void rmsnormForward(const float *h, const float *g, float *n, float *r, int64_t D) {
  const int64_t b = blockIdx.x;
  const float *row = h + b * D;
  double ss = 0;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
    ss += static_cast<double>(row[j]) * row[j];
  ss = blockSum(ss);
  const float inv = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(D)) + kRmsEps);
  if (threadIdx.x == 0)
    r[b] = inv;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
    n[b * D + j] = row[j] * inv * g[j];
}

// a += b1 (per column); z = silu(a).
__global__ void biasSilu(float *a, const float *b1, float *z, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = a[i] + b1[i % cols];
    a[i] = v;
    z[i] = v * sigmoidf(v);
  }
}

// out = h + b2 (per column): the residual plus fc2's bias; fc2's GEMM adds onto it.
__global__ void residualBias(const float *h, const float *b2, float *out, int64_t rows,
                             int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = h[i] + b2[i % cols];
}

// loss = mean (y − t)², dy = 2 (y − t) / n. One block of kRowThreads.
__global__ void mseLoss(const float *y, const float *t, float *dy, int64_t n, float scale,
                        double *loss) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float d = y[i] - t[i];
    sum += static_cast<double>(d) * d;
    dy[i] = scale * d;
  }
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    *loss = sum / static_cast<double>(n);
}

// dst[j] += Σ_b src[b, j], rows added in order as on the CPU.
__global__ void columnSumAdd(const float *src, float *dst, int64_t rows, int64_t cols) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= cols)
    return;
  float s = dst[j];
  for (int64_t b = 0; b < rows; ++b)
    s += src[b * cols + j];
  dst[j] = s;
}

// da = dz · silu'(a).
__global__ void siluBackward(const float *dz, const float *a, float *da, int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float s = sigmoidf(a[i]);
    da[i] = dz[i] * s * (1.0f + a[i] * (1.0f - s));
  }
}

// n = u ⊙ g with u = h · r: dh += r (du − u · mean(du ⊙ u)), du = dn ⊙ g.
// One block per row.
__global__ void rmsnormBackwardInput(const float *h, const float *r, const float *dn,
                                     const float *g, float *dh, int64_t D) {
  const int64_t b = blockIdx.x;
  const float rb = r[b];
  double dot = 0;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float u = h[b * D + j] * rb;
    const float du = dn[b * D + j] * g[j];
    dot += static_cast<double>(du) * u;
  }
  dot = blockSum(dot);
  const float mean = static_cast<float>(dot / static_cast<double>(D));
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float u = h[b * D + j] * rb;
    const float du = dn[b * D + j] * g[j];
    dh[b * D + j] += rb * (du - u * mean);
  }
}

// dg[j] += Σ_b dn[b, j] · h[b, j] · r[b], rows in order.
__global__ void rmsnormBackwardGain(const float *h, const float *r, const float *dn, float *dg,
                                    int64_t rows, int64_t D) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= D)
    return;
  float s = dg[j];
  for (int64_t b = 0; b < rows; ++b) {
    const float u = h[b * D + j] * r[b];
    s += dn[b * D + j] * u;
  }
  dg[j] = s;
}

} // namespace

// ------------------------------------------------------------------ model

struct CudaModel::Impl {
  Config cfg;
  int64_t batch = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  float *arena = nullptr;    // every activation and scratch buffer below
  double *lossDev = nullptr; // the loss of the last forward
  // Activations kept for backward (as tiny::Model), row-major.
  float *h = nullptr;   // L+1 residual streams [B, D]
  float *rms = nullptr; // L: 1/rms per row [B]
  float *n = nullptr;   // L: normalized input [B, D]
  float *a = nullptr;   // L: fc1 pre-activation [B, H]
  float *z = nullptr;   // L: silu(a) [B, H]
  float *y = nullptr, *dy = nullptr, *dh = nullptr, *dn = nullptr, *da = nullptr, *dz = nullptr;

  float *hAt(int64_t l) const { return h + l * batch * cfg.dim; }
  float *rmsAt(int64_t l) const { return rms + l * batch; }
  float *nAt(int64_t l) const { return n + l * batch * cfg.dim; }
  float *aAt(int64_t l) const { return a + l * batch * cfg.hidden; }
  float *zAt(int64_t l) const { return z + l * batch * cfg.hidden; }

  // C = op(A) · op(B) + beta · C, all row-major (TinyModel.cpp's gemm). A
  // row-major matrix read column-major is its transpose, so this is the
  // column-major Cᵀ = op(B)ᵀ · op(A)ᵀ: the operands swap, the flags stay.
  void gemm(bool transA, bool transB, int64_t m, int64_t nn, int64_t k, const float *A, int64_t lda,
            const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    const float alpha = 1.0f;
    check(cublasSgemm(blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                      static_cast<int>(nn), static_cast<int>(m), static_cast<int>(k), &alpha, B,
                      static_cast<int>(ldb), A, static_cast<int>(lda), &beta, C,
                      static_cast<int>(ldc)),
          "cublasSgemm");
  }

  void forward(ParamAccess &access, const float *x, const float *t);
  void backward(ParamAccess &access, const float *x);
  float readLoss();
};

CudaModel::CudaModel(const Config &cfg, int64_t batch, cudaStream_t stream)
    : impl_(std::make_unique<Impl>()) {
  if (batch <= 0)
    throw std::invalid_argument("tiny::CudaModel: batch must be positive");
  Impl &m = *impl_;
  m.cfg = cfg;
  m.batch = batch;
  m.stream = stream;
  const int64_t B = batch, D = cfg.dim, H = cfg.hidden, O = cfg.outDim, L = cfg.layers;
  const int64_t sizes[] = {(L + 1) * B * D, L * B, L * B * D, L * B * H, L * B * H, B * O,
                           B * O,           B * D, B * D,     B * H,     B * H};
  float **ptrs[] = {&m.h, &m.rms, &m.n, &m.a, &m.z, &m.y, &m.dy, &m.dh, &m.dn, &m.da, &m.dz};
  int64_t total = 0;
  for (int64_t s : sizes)
    total += (s + 63) / 64 * 64; // 256-byte aligned pieces
  check(cudaMalloc(&m.arena, static_cast<size_t>(total) * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&m.lossDev, sizeof(double)), "cudaMalloc");
  int64_t offset = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    *ptrs[i] = m.arena + offset;
    offset += (sizes[i] + 63) / 64 * 64;
  }
  check(cublasCreate(&m.blas), "cublasCreate");
  check(cublasSetStream(m.blas, stream), "cublasSetStream");
  // Plain fp32 SGEMMs: no TF32 even under NVIDIA_TF32_OVERRIDE, so the GPU
  // agrees with the CPU model to fp32 rounding.
  check(cublasSetMathMode(m.blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
}

CudaModel::~CudaModel() {
  if (!impl_)
    return;
  cudaStreamSynchronize(impl_->stream);
  if (impl_->blas)
    cublasDestroy(impl_->blas);
  cudaFree(impl_->arena);
  cudaFree(impl_->lossDev);
}

const Config &CudaModel::config() const { return impl_->cfg; }
int64_t CudaModel::batch() const { return impl_->batch; }

void CudaModel::Impl::forward(ParamAccess &access, const float *x, const float *t) {
  const int64_t B = batch, I = cfg.inDim, D = cfg.dim, H = cfg.hidden, O = cfg.outDim;
  gemm(false, true, B, D, I, x, I, access.param("embed.weight"), I, 0.0f, hAt(0), D);

  for (int64_t l = 0; l < cfg.layers; ++l) {
    const LayerNames names = layerNames(l);
    const int li = static_cast<int>(l);
    access.beforeLayerForward(li);
    const float *g = access.param(names.norm);
    const float *w1 = access.param(names.fc1w);
    const float *b1 = access.param(names.fc1b);
    const float *w2 = access.param(names.fc2w);
    const float *b2 = access.param(names.fc2b);
    rmsnormForward<<<static_cast<unsigned>(B), kRowThreads, 0, stream>>>(hAt(l), g, nAt(l),
                                                                         rmsAt(l), D);
    launched("rmsnormForward");
    gemm(false, true, B, H, D, nAt(l), D, w1, D, 0.0f, aAt(l), H);
    biasSilu<<<gridFor(B * H), kThreads, 0, stream>>>(aAt(l), b1, zAt(l), B, H);
    launched("biasSilu");
    residualBias<<<gridFor(B * D), kThreads, 0, stream>>>(hAt(l), b2, hAt(l + 1), B, D);
    launched("residualBias");
    gemm(false, true, B, D, H, zAt(l), H, w2, H, 1.0f, hAt(l + 1), D);
    access.afterLayerForward(li);
  }

  gemm(false, true, B, O, D, hAt(cfg.layers), D, access.param("head.weight"), D, 0.0f, y, O);
  const float scale = 2.0f / static_cast<float>(B * O);
  mseLoss<<<1, kRowThreads, 0, stream>>>(y, t, dy, B * O, scale, lossDev);
  launched("mseLoss");
}

void CudaModel::Impl::backward(ParamAccess &access, const float *x) {
  const int64_t B = batch, I = cfg.inDim, D = cfg.dim, H = cfg.hidden, O = cfg.outDim;
  const int64_t L = cfg.layers;

  // head: y = h_L · headᵀ
  gemm(true, false, O, D, B, dy, O, hAt(L), D, 1.0f, access.grad("head.weight"), D);
  gemm(false, false, B, D, O, dy, O, access.param("head.weight"), D, 0.0f, dh, D);

  for (int64_t l = L - 1; l >= 0; --l) {
    const LayerNames names = layerNames(l);
    const int li = static_cast<int>(l);
    access.beforeLayerBackward(li);
    const float *g = access.param(names.norm);
    const float *w1 = access.param(names.fc1w);
    const float *w2 = access.param(names.fc2w);
    float *dg = access.grad(names.norm);
    float *dw1 = access.grad(names.fc1w);
    float *db1 = access.grad(names.fc1b);
    float *dw2 = access.grad(names.fc2w);
    float *db2 = access.grad(names.fc2b);

    // o = z · fc2ᵀ + b2, with do = dh (the residual passes dh through)
    gemm(true, false, D, H, B, dh, D, zAt(l), H, 1.0f, dw2, H);
    columnSumAdd<<<gridFor(D), kThreads, 0, stream>>>(dh, db2, B, D);
    launched("columnSumAdd");
    gemm(false, false, B, H, D, dh, D, w2, H, 0.0f, dz, H);
    // z = silu(a)
    siluBackward<<<gridFor(B * H), kThreads, 0, stream>>>(dz, aAt(l), da, B * H);
    launched("siluBackward");
    // a = n · fc1ᵀ + b1
    gemm(true, false, H, D, B, da, H, nAt(l), D, 1.0f, dw1, D);
    columnSumAdd<<<gridFor(H), kThreads, 0, stream>>>(da, db1, B, H);
    launched("columnSumAdd");
    gemm(false, false, B, D, H, da, H, w1, D, 0.0f, dn, D);
    // n = rmsnorm(h) ⊙ g
    rmsnormBackwardGain<<<gridFor(D), kThreads, 0, stream>>>(hAt(l), rmsAt(l), dn, dg, B, D);
    launched("rmsnormBackwardGain");
    rmsnormBackwardInput<<<static_cast<unsigned>(B), kRowThreads, 0, stream>>>(hAt(l), rmsAt(l), dn,
                                                                               g, dh, D);
    launched("rmsnormBackwardInput");
    access.afterLayerBackward(li);
  }

  // embed: h_0 = x · embedᵀ
  gemm(true, false, D, I, B, dh, D, x, I, 1.0f, access.grad("embed.weight"), I);
}

float CudaModel::Impl::readLoss() {
  double loss = 0;
  check(cudaMemcpyAsync(&loss, lossDev, sizeof loss, cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync (loss)");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return static_cast<float>(loss);
}

float CudaModel::forwardBackward(ParamAccess &access, const float *x, const float *t) {
  impl_->forward(access, x, t);
  impl_->backward(access, x);
  return impl_->readLoss();
}

float CudaModel::loss(ParamAccess &access, const float *x, const float *t) {
  impl_->forward(access, x, t);
  return impl_->readLoss();
}

} // namespace tiny
