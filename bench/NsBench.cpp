// CPU Newton-Schulz throughput beside plain OpenBLAS sgemm, in one run.
//
// NS cost per iteration for an m x n matrix with s = min(m,n), l = max(m,n):
// A = X X^T (2 s^2 l) + A A (2 s^3) + B X (2 s^2 l) = 4 s^2 l + 2 s^3 flops.
// The elementwise work (normalization, copies, transposes) is not counted, so
// NS GFLOP/s below the sgemm figure measures that overhead plus the small
// s x s x s product's lower efficiency.
//
// Timing is wall-clock (UseRealTime): OpenBLAS runs its own threads, which the
// default per-thread CPU timer would not see.
#include "kernels/cpu/MuonKernels.h"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace {

namespace k = dmuon::kernels;

constexpr int kNsSteps = 5;

std::vector<float> randomMatrix(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> m(static_cast<size_t>(n));
  for (float &x : m)
    x = dist(rng);
  return m;
}

void BM_NewtonSchulz(benchmark::State &state) {
  const int64_t rows = state.range(0);
  const int64_t cols = state.range(1);
  const auto set = static_cast<k::NsCoefficients>(state.range(2));
  const auto s = static_cast<double>(std::min(rows, cols));
  const auto l = static_cast<double>(std::max(rows, cols));
  const auto in = randomMatrix(rows * cols, 1);
  std::vector<float> out(in.size());
  k::NsWorkspace ws;
  k::newtonSchulz(in.data(), out.data(), rows, cols, kNsSteps, set, ws); // warm workspace
  for (auto _ : state) {
    k::newtonSchulz(in.data(), out.data(), rows, cols, kNsSteps, set, ws);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double flops = kNsSteps * (4.0 * s * s * l + 2.0 * s * s * s);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(set == k::NsCoefficients::Original ? "NS5 original" : "NS5 polar-express");
}

// C (M x N) = A (M x K) * B, row-major; transB selects B^T (the Gram shape).
void BM_Sgemm(benchmark::State &state) {
  const int64_t m = state.range(0);
  const int64_t n = state.range(1);
  const int64_t kk = state.range(2);
  const bool transB = state.range(3) != 0;
  const auto a = randomMatrix(m * kk, 2);
  const auto b = randomMatrix(kk * n, 3);
  std::vector<float> c(static_cast<size_t>(m * n));
  const auto M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(kk);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K, 1.0f,
                a.data(), K, b.data(), transB ? K : N, 0.0f, c.data(), N);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m * n * kk) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(transB ? "sgemm NT (Gram shape)" : "sgemm NN");
}

constexpr int64_t kOriginal = static_cast<int64_t>(k::NsCoefficients::Original);
constexpr int64_t kPolar = static_cast<int64_t>(k::NsCoefficients::PolarExpress);

BENCHMARK(BM_NewtonSchulz)
    ->ArgNames({"rows", "cols", "set"})
    ->Args({256, 256, kOriginal})
    ->Args({512, 512, kOriginal})
    ->Args({1024, 1024, kOriginal})
    ->Args({1024, 1024, kPolar})
    ->Args({1024, 4096, kOriginal})
    ->Args({4096, 1024, kOriginal})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The same sizes as plain sgemm: n^3 for the square cases; for 1024 x 4096
// both products NS is made of, the Gram X X^T (1024 x 1024, k = 4096) and the
// update B X (1024 x 4096, k = 1024).
BENCHMARK(BM_Sgemm)
    ->ArgNames({"M", "N", "K", "transB"})
    ->Args({256, 256, 256, 0})
    ->Args({512, 512, 512, 0})
    ->Args({1024, 1024, 1024, 0})
    ->Args({1024, 1024, 4096, 1})
    ->Args({1024, 4096, 1024, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

} // namespace

BENCHMARK_MAIN();
