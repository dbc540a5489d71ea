// CPU Newton-Schulz in its three forms (three-GEMM, symmetric, Gram), a batch
// of expert-sized matrices, and plain OpenBLAS sgemm, in one run; a table of
// the forms' speedups over the three-GEMM form follows Google Benchmark's
// own output.
//
// Every NS figure counts the three-GEMM form's flops, 5 (4 s^2 l + 2 s^3)
// for an s x l matrix, whatever form ran: GFLOP/s then compare like
// speedups. The flops a form really does are in kernels/NsForms.h.
//
// Timing is wall-clock (UseRealTime): OpenBLAS and the batched call run
// their own threads, which the default per-thread CPU timer would not see.
#include "kernels/NsForms.h"
#include "kernels/cpu/MuonKernels.h"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace k = dmuon::kernels;
using k::NsForm;

constexpr int kNsSteps = 5;
constexpr auto kSet = k::NsCoefficients::Original; // every set costs the same

std::vector<float> randomMatrix(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> m(static_cast<size_t>(n));
  for (float &x : m)
    x = dist(rng);
  return m;
}

double threeGemmFlops(int64_t batch, int64_t rows, int64_t cols) {
  return static_cast<double>(batch) * k::ns::flops(NsForm::ThreeGemm, rows, cols, kNsSteps);
}

void setGflops(benchmark::State &state, double flops) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// One rows x cols matrix in one form.
void BM_NewtonSchulz(benchmark::State &state) {
  const int64_t rows = state.range(0);
  const int64_t cols = state.range(1);
  const auto form = static_cast<NsForm>(state.range(2));
  const auto in = randomMatrix(rows * cols, 1);
  std::vector<float> out(in.size());
  k::NsWorkspace ws;
  k::newtonSchulz(in.data(), out.data(), rows, cols, kNsSteps, kSet, ws, form); // warm workspace
  for (auto _ : state) {
    k::newtonSchulz(in.data(), out.data(), rows, cols, kNsSteps, kSet, ws, form);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  setGflops(state, threeGemmFlops(1, rows, cols));
  state.SetLabel(k::ns::formName(form));
}

// Mode of BM_Batch: today's loop (each matrix's three-GEMM NS in turn, on
// BLAS's threads, as the CPU device ran a 3-D param before) or the batched
// call in a form.
constexpr int64_t kLoop = -1;

void BM_Batch(benchmark::State &state) {
  const int64_t batch = state.range(0);
  const int64_t rows = state.range(1);
  const int64_t cols = state.range(2);
  const int64_t mode = state.range(3);
  const int64_t n = rows * cols;
  const auto in = randomMatrix(batch * n, 2);
  std::vector<float> out(in.size());
  k::NsWorkspace ws;
  auto run = [&] {
    if (mode == kLoop) {
      for (int64_t b = 0; b < batch; ++b)
        k::newtonSchulz(in.data() + b * n, out.data() + b * n, rows, cols, kNsSteps, kSet, ws,
                        NsForm::ThreeGemm);
    } else {
      k::newtonSchulzBatched(in.data(), out.data(), batch, rows, cols, kNsSteps, kSet, ws,
                             static_cast<NsForm>(mode));
    }
  };
  run(); // warm workspace
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  setGflops(state, threeGemmFlops(batch, rows, cols));
  state.SetLabel(mode == kLoop ? "loop of three-gemm"
                               : std::string("batched ") +
                                     k::ns::formName(static_cast<NsForm>(mode)) + " (" +
                                     std::to_string(k::nsBatchThreads(batch)) + " threads)");
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
  setGflops(state, 2.0 * static_cast<double>(m * n * kk));
  state.SetLabel(transB ? "sgemm NT (Gram shape)" : "sgemm NN");
}

constexpr auto kThreeGemm = static_cast<int64_t>(NsForm::ThreeGemm);
constexpr auto kSymmetric = static_cast<int64_t>(NsForm::Symmetric);
constexpr auto kGram = static_cast<int64_t>(NsForm::Gram);

struct Shape {
  int64_t rows, cols;
};
constexpr Shape kShapes[] = {{1024, 1024}, {1024, 4096}, {4096, 1024}, {2048, 7168}};
constexpr int64_t kBatch = 32, kBatchRows = 768, kBatchCols = 2048;

void registerBenchmarks() {
  for (const Shape &s : kShapes)
    for (int64_t form : {kThreeGemm, kSymmetric, kGram})
      benchmark::RegisterBenchmark("BM_NewtonSchulz", BM_NewtonSchulz)
          ->ArgNames({"rows", "cols", "form"})
          ->Args({s.rows, s.cols, form})
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  for (int64_t mode : {kLoop, kThreeGemm, kSymmetric, kGram})
    benchmark::RegisterBenchmark("BM_Batch", BM_Batch)
        ->ArgNames({"batch", "rows", "cols", "mode"})
        ->Args({kBatch, kBatchRows, kBatchCols, mode})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  // The two products the 1024 x 4096 NS is made of, as plain sgemm: the Gram
  // X X^T (1024 x 1024, k = 4096) and the update B X (1024 x 4096, k = 1024).
  benchmark::RegisterBenchmark("BM_Sgemm", BM_Sgemm)
      ->ArgNames({"M", "N", "K", "transB"})
      ->Args({1024, 1024, 1024, 0})
      ->Args({1024, 1024, 4096, 1})
      ->Args({1024, 4096, 1024, 0})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

// Console output as usual, plus the real time of every NS run, keyed by its
// arguments, for the summary table.
class SummaryReporter : public benchmark::ConsoleReporter {
public:
  // (rows, cols, form or batch mode) -> ms per NS (per batch for BM_Batch).
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> nsMs;
  std::map<int64_t, double> batchMs;

  void ReportRuns(const std::vector<Run> &runs) override {
    ConsoleReporter::ReportRuns(runs);
    // With --benchmark_repetitions the median aggregate, reported after the
    // repetitions, replaces them.
    for (const Run &run : runs) {
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if ((run.run_type != Run::RT_Iteration && !median) || run.error_occurred)
        continue;
      const double ms =
          run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit) * 1e3;
      const auto args = parseArgs(run.run_name.args);
      if (run.run_name.function_name == "BM_NewtonSchulz" && args.size() == 3)
        nsMs[{args[0], args[1], args[2]}] = ms;
      else if (run.run_name.function_name == "BM_Batch" && args.size() == 4)
        batchMs[args[3]] = ms;
    }
  }

private:
  // "rows:1024/cols:4096/form:1" -> {1024, 4096, 1}
  static std::vector<int64_t> parseArgs(const std::string &s) {
    std::vector<int64_t> out;
    size_t pos = 0;
    while ((pos = s.find(':', pos)) != std::string::npos) {
      ++pos;
      out.push_back(std::stoll(s.substr(pos, s.find('/', pos) - pos)));
    }
    return out;
  }
};

double gflops(double flops, double ms) { return ms > 0 ? flops / (ms * 1e6) : 0.0; }

void printSummary(const SummaryReporter &r) {
  std::printf("\nNS5 time per matrix (ms) and speedup over three-gemm; auto = the form "
              "kernels/NsForms.h picks\n");
  std::printf("%-16s %11s %11s %7s %11s %7s  %-10s %9s\n", "shape", "three-gemm", "symmetric",
              "x", "gram", "x", "auto", "auto x");
  double largeAutoGflops = 0.0;
  for (const Shape &s : kShapes) {
    auto ms = [&](int64_t form) {
      const auto it = r.nsMs.find({s.rows, s.cols, form});
      return it == r.nsMs.end() ? 0.0 : it->second;
    };
    const double ref = ms(kThreeGemm), sym = ms(kSymmetric), gram = ms(kGram);
    const NsForm pick = k::ns::chooseForm(s.rows, s.cols);
    const double autoMs = ms(static_cast<int64_t>(pick));
    const std::string name = std::to_string(s.rows) + "x" + std::to_string(s.cols);
    std::printf("%-16s %11.1f %11.1f %6.2fx %11.1f %6.2fx  %-10s %8.2fx\n", name.c_str(), ref,
                sym, sym > 0 ? ref / sym : 0.0, gram, gram > 0 ? ref / gram : 0.0,
                k::ns::formName(pick), autoMs > 0 ? ref / autoMs : 0.0);
    largeAutoGflops = gflops(threeGemmFlops(1, s.rows, s.cols), autoMs); // the last shape's
  }

  const double flops = threeGemmFlops(kBatch, kBatchRows, kBatchCols);
  const NsForm pick = k::ns::chooseForm(kBatchRows, kBatchCols);
  auto batchMs = [&](int64_t mode) {
    const auto it = r.batchMs.find(mode);
    return it == r.batchMs.end() ? 0.0 : it->second;
  };
  const double loop = batchMs(kLoop);
  std::printf("\nBatch %lldx%lldx%lld (%d threads): ms per batch, speedup over the loop of "
              "three-gemm, GFLOP/s (three-gemm flops)\n",
              static_cast<long long>(kBatch), static_cast<long long>(kBatchRows),
              static_cast<long long>(kBatchCols), k::nsBatchThreads(kBatch));
  std::printf("  %-26s %10.1f ms %6.2fx %7.1f GFLOP/s\n", "loop of three-gemm", loop, 1.0,
              gflops(flops, loop));
  for (int64_t mode : {kThreeGemm, kSymmetric, kGram}) {
    const double ms = batchMs(mode);
    const std::string name = std::string("batched ") + k::ns::formName(static_cast<NsForm>(mode)) +
                             (static_cast<NsForm>(mode) == pick ? " (auto)" : "");
    std::printf("  %-26s %10.1f ms %6.2fx %7.1f GFLOP/s\n", name.c_str(), ms,
                ms > 0 ? loop / ms : 0.0, gflops(flops, ms));
  }
  const double autoGflops = gflops(flops, batchMs(static_cast<int64_t>(pick)));
  const Shape &large = kShapes[std::size(kShapes) - 1];
  std::printf("  batched auto / single %lldx%lld auto GFLOP/s: %.2f\n",
              static_cast<long long>(large.rows), static_cast<long long>(large.cols),
              largeAutoGflops > 0 ? autoGflops / largeAutoGflops : 0.0);
}

} // namespace

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  registerBenchmarks();
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  printSummary(reporter);
  benchmark::Shutdown();
  return 0;
}
