// dmuon_matrix_optimizer_bench: a matrix optimizer's step through dmuon
// against its naive data-parallel form, on the same ranks and gradients.
//   dmuon   one owner per matrix: the gradients reduced to the owners during
//           backward (post_backward), the rule run by the owner only, the
//           updated values broadcast back (step);
//   naive   every rank all-reduces every gradient and runs the rule on every
//           matrix (a one-rank libdmuon runtime per rank on MPI_COMM_SELF:
//           the same kernels);
// and, for SOAP and Shampoo, dmuon with and without staggered refreshes
// (dmuonc --stagger-refreshes). Each step's time is the slowest rank's, from
// the first gradient's reduce to the end of step(); the forward and the
// gradients themselves are not timed. Steps before --warmup are not counted
// (SOAP's first step only gathers statistics).
//
//   mpirun -n 2 --oversubscribe build/bench/dmuon_matrix_optimizer_bench --optimizer soap
#include "dmuon/dmuon.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Flags {
  std::string optimizer = "soap", work = "matrix-optimizer-bench", dmuonc = DMUON_BENCH_DMUONC;
  int matrices = 16, dim = 256, steps = 20, warmup = 2, frequency = 10;
};

[[noreturn]] void usage(const char *why) {
  std::fprintf(stderr,
               "dmuon_matrix_optimizer_bench: %s\n"
               "usage: mpirun -n R dmuon_matrix_optimizer_bench [--optimizer "
               "muon|normuon|soap|shampoo]\n"
               "  [--matrices N (16)] [--dim D (256)] [--steps S (20)] [--warmup W (2)]\n"
               "  [--frequency F (10): SOAP's or Shampoo's precondition frequency]\n"
               "  [--work DIR] [--dmuonc PATH]\n",
               why);
  std::exit(2);
}

Flags parse(int argc, char **argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc)
      usage(("missing value for " + a).c_str());
    const std::string v = argv[++i];
    auto positive = [&](int &out) {
      out = std::atoi(v.c_str());
      if (out < 1)
        usage((a + " must be a positive integer, not '" + v + "'").c_str());
    };
    if (a == "--optimizer") {
      if (v != "muon" && v != "normuon" && v != "soap" && v != "shampoo")
        usage(("unknown --optimizer '" + v + "'").c_str());
      f.optimizer = v;
    } else if (a == "--matrices")
      positive(f.matrices);
    else if (a == "--dim")
      positive(f.dim);
    else if (a == "--steps")
      positive(f.steps);
    else if (a == "--warmup")
      positive(f.warmup);
    else if (a == "--frequency")
      positive(f.frequency);
    else if (a == "--work")
      f.work = v;
    else if (a == "--dmuonc")
      f.dmuonc = v;
    else
      usage(("unknown flag " + a).c_str());
  }
  if (f.warmup >= f.steps)
    usage("--warmup must be below --steps");
  return f;
}

// Rank 0 writes the manifest (N square matrices on the rule) and compiles it
// for `mesh`; every rank learns whether it worked.
std::string compile(const Flags &f, const std::string &mesh, bool stagger, int rank) {
  const std::string manifest = f.work + "/matrices.toml";
  const std::string plan =
      f.work + "/" + f.optimizer + "-" + mesh + (stagger ? "" : "-unstaggered") + ".plan";
  int failed = 0;
  if (rank == 0) {
    std::filesystem::create_directories(f.work);
    std::ofstream(manifest) << "[model]\nname = \"matrices\"\n\n[[param]]\nrepeat = "
                            << f.matrices << "\nprefix = \"layers.{i}.\"\n  [[param.param]]\n"
                            << "  name = \"weight\"\n  shape = [" << f.dim << ", " << f.dim
                            << "]\n  optimizer = \"" << f.optimizer << "\"\n";
    const std::string freq = std::to_string(f.frequency);
    const std::string cmd = f.dmuonc + " " + manifest + " --mesh " + mesh +
                            " --small-param-threshold=0 --soap-precondition-frequency=" + freq +
                            " --shampoo-precondition-frequency=" + freq +
                            " --stagger-refreshes=" + (stagger ? "true" : "false") + " -o " +
                            plan;
    failed = std::system(cmd.c_str()) != 0;
  }
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (failed)
    throw std::runtime_error("dmuonc failed on " + manifest + " --mesh " + mesh);
  return plan;
}

float gradient(int param, int step, int64_t i) {
  uint64_t x = (static_cast<uint64_t>(param) * 1000003u + static_cast<uint64_t>(step) * 7919u +
                static_cast<uint64_t>(i)) *
               0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return 1e-3f * (static_cast<float>(x & 0xFFFF) / 32768.f - 1.f);
}

// One run of `steps` steps; each step's slowest-rank seconds. `reduce`
// (naive only) averages a gradient over the world in place.
std::vector<double> run(const Flags &f, const std::string &planPath, MPI_Comm comm,
                        const std::function<void(float *, int64_t)> &reduce) {
  dmuon::Plan plan(planPath);
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.backend = DMUON_BACKEND_MPI;
  o.communicator = &comm;
  dmuon::Runtime rt(plan, o);
  const int64_t numel = static_cast<int64_t>(f.dim) * f.dim;
  std::vector<float> init(static_cast<size_t>(numel));
  for (int i = 0; i < plan.numParams(); ++i) {
    for (int64_t k = 0; k < numel; ++k)
      init[static_cast<size_t>(k)] = 10 * gradient(i, -1, k);
    rt.bindParam(plan.param(i).name, init.data(), numel);
  }
  std::vector<std::vector<int>> paramsOf(static_cast<size_t>(plan.numHookGroups()));
  for (int i = 0; i < plan.numParams(); ++i)
    paramsOf[static_cast<size_t>(plan.param(i).hook_group)].push_back(i);
  std::vector<double> seconds;
  for (int step = 0; step < f.steps; ++step) {
    for (int g = 0; g < plan.numHookGroups(); ++g) {
      rt.preForward(g);
      rt.postForward(g);
    }
    double timed = 0;
    for (int g = plan.numHookGroups() - 1; g >= 0; --g) {
      rt.preBackward(g);
      for (int i : paramsOf[static_cast<size_t>(g)]) {
        float *grad = rt.gradView(i);
        for (int64_t k = 0; k < numel; ++k)
          grad[k] += gradient(i, step, k);
      }
      const auto t0 = std::chrono::steady_clock::now();
      if (reduce)
        for (int i : paramsOf[static_cast<size_t>(g)])
          reduce(rt.gradView(i), numel);
      rt.postBackward(g);
      timed += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    const auto t0 = std::chrono::steady_clock::now();
    rt.finishBackward();
    rt.step();
    rt.synchronize();
    timed += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MPI_Allreduce(MPI_IN_PLACE, &timed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (step >= f.warmup)
      seconds.push_back(timed);
  }
  return seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int rc = 0;
  try {
    const Flags f = parse(argc, argv);
    const bool preconditioned = f.optimizer == "soap" || f.optimizer == "shampoo";
    const std::string dmuonPlan = compile(f, std::to_string(world), true, rank);
    const std::string naivePlan = compile(f, "1", true, rank);
    const std::vector<double> dmuon = run(f, dmuonPlan, MPI_COMM_WORLD, nullptr);
    const std::vector<double> naive =
        run(f, naivePlan, MPI_COMM_SELF, [world](float *g, int64_t n) {
          MPI_Allreduce(MPI_IN_PLACE, g, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          for (int64_t k = 0; k < n; ++k)
            g[k] /= static_cast<float>(world);
        });
    std::vector<double> unstaggered;
    if (preconditioned)
      unstaggered = run(f, compile(f, std::to_string(world), false, rank), MPI_COMM_WORLD,
                        nullptr);
    if (rank == 0) {
      auto line = [](const char *name, const std::vector<double> &s) {
        std::printf("%-20s median %9.3f ms  worst %9.3f ms  worst/median %.2f\n", name,
                    1e3 * median(s), 1e3 * *std::max_element(s.begin(), s.end()),
                    *std::max_element(s.begin(), s.end()) / median(s));
      };
      std::printf("%s: %d matrices of %dx%d, %d ranks, steps %d..%d, frequency %d\n",
                  f.optimizer.c_str(), f.matrices, f.dim, f.dim, world, f.warmup, f.steps - 1,
                  f.frequency);
      line("dmuon", dmuon);
      if (preconditioned)
        line("dmuon unstaggered", unstaggered);
      line("naive", naive);
      std::printf("dmuon / naive (medians): %.3f\n", median(dmuon) / median(naive));
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dmuon_matrix_optimizer_bench (rank %d): %s\n", rank, e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
