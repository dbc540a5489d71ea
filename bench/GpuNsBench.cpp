// dmuon-gpu-bench: Newton-Schulz throughput on the GPU (kernels/cuda) beside
// cuBLAS bf16 GEMM throughput of the same shapes, measured in the same run.
//
// For an s x l matrix (s = min side, l = max side) one NS iteration costs
// 4 s^2 l + 2 s^3 flops (A = X X^T: 2 s^2 l; A A: 2 s^3; B X: 2 s^2 l), and
// NS TFLOP/s = steps * that / time of dmuon::cuda::newtonSchulz (fp32 in,
// fp32 out: norm, casts and copies included). The GEMM column times exactly
// those three cuBLAS calls (bf16 operands and output, fp32 accumulate) with
// nothing around them, so NS/GEMM is the fraction of the achievable GEMM rate
// that NS keeps. Both run on the same random matrix (the GEMMs on its
// normalized bf16 copy, as NS's first iteration sees it): tensor cores on
// zeros draw less power and hold higher clocks on Hopper, which would inflate
// the GEMM rate and understate NS/GEMM. Times are the median of --reps runs after --warmup runs,
// measured with CUDA events on one stream.
//
// A shape BxRxC is a batch of B matrices of R x C (MoE experts): NS runs
// them in one batched call, the GEMM baseline as strided-batched GEMMs, and
// the flops are B times one matrix's.
//
// Where the long side is at least ns::kGramMinAspect times the short one
// (the shapes NsForm::Auto runs in the Gram form), the Gram form is timed
// too; its column counts the three-GEMM form's flops, so "Gram x" is its
// speedup over today's form.
//
// Usage: dmuon-gpu-bench [--steps N] [--reps N] [--warmup N] [--polar]
//                        [--shape [B]xRxC ...]
// Prints a table and a final "target:" line (NS/GEMM at 4096x4096 >= 0.60).
// Exit status: 0 when it ran (target met or not), 1 on a CUDA error or when
// no GPU is visible.
#include "kernels/NsForms.h"
#include "kernels/cuda/CudaKernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace cu = dmuon::cuda;

constexpr double kTargetRatio = 0.60;

#define CHECK_CUDA(expr)                                                                           \
  do {                                                                                             \
    const cudaError_t e_ = (expr);                                                                 \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "dmuon-gpu-bench: %s: %s\n", #expr, cudaGetErrorString(e_));            \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

#define CHECK_BLAS(expr)                                                                           \
  do {                                                                                             \
    const cublasStatus_t s_ = (expr);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      std::fprintf(stderr, "dmuon-gpu-bench: %s: %s\n", #expr, cublasGetStatusString(s_));         \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

#define CHECK_CU(expr)                                                                             \
  do {                                                                                             \
    const cu::Result r_ = (expr);                                                                  \
    if (!r_.ok()) {                                                                                \
      std::fprintf(stderr, "dmuon-gpu-bench: %s: %s\n", #expr, r_.message.c_str());                \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

struct Shape {
  int64_t batch, rows, cols;
};

struct Options {
  int steps = 5;
  int reps = 5;
  int warmup = 2;
  bool polar = false;
  std::vector<Shape> shapes;
};

// Uniform values in [-1, 1) from a 64-bit LCG: fast for 67M elements.
std::vector<float> randomFill(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float &f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1ull << 23) - 1.0);
  }
  return v;
}

// The bf16 bits of x, rounded to nearest even (x finite).
uint16_t toBf16(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// NS's first bf16 iterate of each of the `batch` matrices in v:
// m / ||m||_F, rounded to bf16.
std::vector<uint16_t> normalizedBf16(const std::vector<float> &v, int64_t batch) {
  const size_t per = v.size() / static_cast<size_t>(batch);
  std::vector<uint16_t> out(v.size());
  for (size_t m = 0; m < static_cast<size_t>(batch); ++m) {
    double sumSq = 0.0;
    for (size_t i = m * per; i < (m + 1) * per; ++i)
      sumSq += static_cast<double>(v[i]) * v[i];
    const double inv = 1.0 / (std::sqrt(sumSq) + 1e-7);
    for (size_t i = m * per; i < (m + 1) * per; ++i)
      out[i] = toBf16(static_cast<float>(v[i] * inv));
  }
  return out;
}

// Median of `reps` timings (ms) of fn() on `stream`, after `warmup` untimed runs.
template <typename Fn> double timeMs(cudaStream_t stream, int warmup, int reps, Fn fn) {
  for (int i = 0; i < warmup; ++i)
    fn();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    fn();
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// cudaMalloc of n elements of T (cuda_runtime_api.h has only the void** form).
template <typename T> T *deviceAlloc(size_t n) {
  void *p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
  return static_cast<T *>(p);
}

// "RxC" or "BxRxC".
bool parseShape(const char *s, Shape &out) {
  long long v[3] = {0, 0, 0};
  int used = 0;
  const bool batched = std::sscanf(s, "%lldx%lldx%lld%n", &v[0], &v[1], &v[2], &used) == 3 &&
                       s[used] == '\0';
  if (!batched) {
    v[0] = 1;
    used = 0;
    if (std::sscanf(s, "%lldx%lld%n", &v[1], &v[2], &used) != 2 || s[used] != '\0')
      return false;
  }
  if (v[0] <= 0 || v[1] <= 0 || v[2] <= 0)
    return false;
  out = {v[0], v[1], v[2]};
  return true;
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dmuon-gpu-bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") {
      o.steps = std::max(1, std::atoi(next()));
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(next()));
    } else if (a == "--warmup") {
      o.warmup = std::max(0, std::atoi(next()));
    } else if (a == "--polar") {
      o.polar = true;
    } else if (a == "--shape") {
      Shape s{};
      const char *v = next();
      if (!parseShape(v, s)) {
        std::fprintf(stderr, "dmuon-gpu-bench: bad shape '%s' (want RxC or BxRxC)\n", v);
        std::exit(2);
      }
      o.shapes.push_back(s);
    } else {
      std::fprintf(stderr,
                   "usage: dmuon-gpu-bench [--steps N] [--reps N] [--warmup N] [--polar] "
                   "[--shape [B]xRxC ...]\n");
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  if (o.shapes.empty())
    o.shapes = {{1, 1024, 1024},  {1, 2048, 2048}, {1, 4096, 4096}, {1, 8192, 8192},
                {1, 4096, 16384}, {1, 8192, 2048}, {1, 1024, 4096}, {1, 2048, 7168},
                {64, 768, 2048}};
  return o;
}

} // namespace

int main(int argc, char **argv) {
  const Options opt = parse(argc, argv);
  if (cu::deviceCount() == 0) {
    std::fprintf(stderr, "dmuon-gpu-bench: no CUDA device visible\n");
    return 1;
  }
  CHECK_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cu::Context *ctx = nullptr;
  CHECK_CU(cu::createContext(0, stream, &ctx));

  // The GEMM baseline gets its own handle with the same workspace size.
  cublasHandle_t blas;
  CHECK_BLAS(cublasCreate(&blas));
  CHECK_BLAS(cublasSetStream(blas, stream));
  void *blasWs = nullptr;
  const size_t blasWsBytes = size_t{32} << 20;
  CHECK_CUDA(cudaMalloc(&blasWs, blasWsBytes));
  CHECK_BLAS(cublasSetWorkspace(blas, blasWs, blasWsBytes));

  std::printf("dmuon-gpu-bench: %s (sm_%d%d, %d SMs), NS %d steps, %s coefficients, "
              "median of %d reps after %d warm-up\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, opt.steps,
              opt.polar ? "PolarExpress" : "Original", opt.reps, opt.warmup);
  std::printf("%-14s %10s %12s %12s %14s %9s %10s %8s\n", "shape", "NS ms", "NS TFLOP/s",
              "GEMM ms/it", "GEMM TFLOP/s", "NS/GEMM", "Gram ms", "Gram x");

  double targetRatio = -1.0;
  for (const Shape &sh : opt.shapes) {
    const int64_t s = std::min(sh.rows, sh.cols), l = std::max(sh.rows, sh.cols);
    const size_t n = static_cast<size_t>(sh.batch * sh.rows * sh.cols);
    const double flopsPerIter = static_cast<double>(sh.batch) * 4.0 * static_cast<double>(s) * static_cast<double>(s) *
                                    static_cast<double>(l) +
                                static_cast<double>(sh.batch) * 2.0 * static_cast<double>(s) *
                                    static_cast<double>(s) * static_cast<double>(s);

    // NS through the library, fp32 in and out.
    float *in = deviceAlloc<float>(n);
    float *out = deviceAlloc<float>(n);
    const std::vector<float> host =
        randomFill(n, static_cast<uint64_t>(sh.batch * 977 + sh.rows * 31 + sh.cols));
    CHECK_CUDA(cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaDeviceSynchronize()); // a pageable copy may return before its DMA lands
    CHECK_CU(cu::reserveWorkspace(ctx, sh.batch, sh.rows, sh.cols));
    const cu::NsCoefficients set = opt.polar ? cu::NsCoefficients::PolarExpress
                                           : cu::NsCoefficients::Original;
    const double nsMs = timeMs(stream, opt.warmup, opt.reps, [&] {
      CHECK_CU(cu::newtonSchulz(ctx, in, out, sh.batch, sh.rows, sh.cols, opt.steps, set,
                                cu::NsForm::ThreeGemm));
    });
    double gramMs = -1.0;
    if (static_cast<double>(l) >= dmuon::kernels::ns::kGramMinAspect * static_cast<double>(s)) {
      gramMs = timeMs(stream, opt.warmup, opt.reps, [&] {
        CHECK_CU(cu::newtonSchulz(ctx, in, out, sh.batch, sh.rows, sh.cols, opt.steps, set,
                                  cu::NsForm::Gram));
      });
    }
    CHECK_CU(cu::synchronize(ctx));
    CHECK_CUDA(cudaFree(in));
    CHECK_CUDA(cudaFree(out));

    // The three GEMMs of one iteration, bare (wide layout: X^T is l x s);
    // bf16 buffers held as uint16_t. X is NS's own normalized input in bf16;
    // every call computes A from X and B from A before reading them, so all
    // three GEMMs multiply NS-like values, never zeros. A batch runs the
    // same calls strided-batched, as NS's batched path does.
    const int64_t nb = sh.batch;
    uint16_t *x = deviceAlloc<uint16_t>(static_cast<size_t>(nb * s * l));
    uint16_t *y = deviceAlloc<uint16_t>(static_cast<size_t>(nb * s * l));
    uint16_t *a = deviceAlloc<uint16_t>(static_cast<size_t>(nb * s * s));
    uint16_t *b = deviceAlloc<uint16_t>(static_cast<size_t>(nb * s * s));
    {
      const std::vector<uint16_t> xs = normalizedBf16(host, nb);
      CHECK_CUDA(cudaMemcpy(x, xs.data(), xs.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaDeviceSynchronize());
    }
    const int S = static_cast<int>(s), L = static_cast<int>(l);
    const float one = 1.0f, zero = 0.0f;
    const long long sl = s * l, ss = s * s;
    const int B = static_cast<int>(nb);
    const double gemmMs = timeMs(stream, opt.warmup, opt.reps, [&] {
      if (nb == 1) {
        CHECK_BLAS(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, S, S, L, &one, x, CUDA_R_16BF, L,
                                x, CUDA_R_16BF, L, &zero, a, CUDA_R_16BF, S, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
        CHECK_BLAS(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, S, S, S, &one, a, CUDA_R_16BF, S,
                                a, CUDA_R_16BF, S, &zero, b, CUDA_R_16BF, S, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
        CHECK_BLAS(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_T, L, S, S, &one, x, CUDA_R_16BF, L,
                                b, CUDA_R_16BF, S, &zero, y, CUDA_R_16BF, L, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
        return;
      }
      CHECK_BLAS(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, S, S, L, &one, x,
                                            CUDA_R_16BF, L, sl, x, CUDA_R_16BF, L, sl, &zero, a,
                                            CUDA_R_16BF, S, ss, B, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
      CHECK_BLAS(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, S, S, S, &one, a,
                                            CUDA_R_16BF, S, ss, a, CUDA_R_16BF, S, ss, &zero, b,
                                            CUDA_R_16BF, S, ss, B, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
      CHECK_BLAS(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_N, CUBLAS_OP_T, L, S, S, &one, x,
                                            CUDA_R_16BF, L, sl, b, CUDA_R_16BF, S, ss, &zero, y,
                                            CUDA_R_16BF, L, sl, B, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT));
    });
    CHECK_CUDA(cudaFree(x));
    CHECK_CUDA(cudaFree(y));
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaFree(b));

    const double nsTflops = opt.steps * flopsPerIter / (nsMs * 1e-3) / 1e12;
    const double gemmTflops = flopsPerIter / (gemmMs * 1e-3) / 1e12;
    const double ratio = nsTflops / gemmTflops;
    const std::string name = (nb > 1 ? std::to_string(nb) + "x" : std::string()) +
                             std::to_string(sh.rows) + "x" + std::to_string(sh.cols);
    std::printf("%-14s %10.3f %12.1f %12.3f %14.1f %9.2f", name.c_str(), nsMs, nsTflops, gemmMs,
                gemmTflops, ratio);
    if (gramMs > 0.0)
      std::printf(" %10.3f %8.2f\n", gramMs, nsMs / gramMs);
    else
      std::printf(" %10s %8s\n", "-", "-");
    std::fflush(stdout);
    if (nb == 1 && sh.rows == 4096 && sh.cols == 4096)
      targetRatio = ratio;
  }

  if (targetRatio >= 0.0)
    std::printf("target: NS/GEMM at 4096x4096 = %.2f (>= %.2f): %s\n", targetRatio, kTargetRatio,
                targetRatio >= kTargetRatio ? "PASS" : "FAIL");
  else
    std::printf("target: 4096x4096 not measured\n");

  CHECK_CUDA(cudaStreamSynchronize(stream));
  cublasDestroy(blas);
  cudaFree(blasWs);
  cu::destroyContext(ctx);
  cudaStreamDestroy(stream);
  return 0;
}
