// dmuon_step_bench: the time of one training step, phase by phase, of four
// ways to train the same model on the same ranks and batches:
//   adamw/dmuon   every param on AdamW through libdmuon (a plan without
//                 hook groups: all-reduce and AdamW inside step());
//   muon/dmuon    Muon through libdmuon: one owner per matrix, broadcast for
//                 forward, reduce to the owner, NS on the owner only;
//   BASELINE 1    every rank all-reduces every gradient and runs NS on every
//                 matrix (NaiveBaselines.cpp);
//   BASELINE 2    Moonlight's Distributed Muon on ZeRO-1: reduce-scatter,
//                 all-gather of every full matrix, NS on every matrix on
//                 every rank, all-gather of the params.
// The variants take turns (--rounds), so that a change in the machine's load
// falls on all of them; each first runs --warmup untimed steps.
//
//   mpirun -n 4 --oversubscribe build/bin/dmuon_step_bench --model llama-shaped
#include "BenchModel.h"
#include "StepBenchFlags.h"
#include "StepReport.h"
#include "StepVariant.h"
#include "dmuon/torch/DmuonTorch.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace step_bench {
namespace {

struct Plans {
  std::string muon, adamw; // paths
};

// Rank 0 writes the model's manifest twice (dmuonc's own Muon/AdamW choice;
// every param on AdamW) and compiles both for the mesh; every rank learns
// whether it worked, so that none waits for a plan that will not come.
Plans compilePlans(const StepBenchFlags &f, const std::string &mesh, int rank) {
  const std::string base = f.work + "/" + modelName(f);
  const Plans plans{base + "-muon-" + mesh + ".plan", base + "-adamw-" + mesh + ".plan"};
  std::string error;
  if (rank == 0) {
    try {
      std::filesystem::create_directories(f.work);
      const std::unique_ptr<BenchModel> model = makeBenchModel(f);
      for (const std::string optimizer : {"", "adamw"}) {
        dmuon_torch::ManifestOptions mo;
        mo.modelName = modelName(f);
        mo.optimizer = optimizer;
        const std::string manifest = base + (optimizer.empty() ? "-muon" : "-adamw") + ".toml";
        std::ofstream(manifest) << dmuon_torch::manifestToml(model->module(), mo);
        // Threshold 0, as examples/gpt: owners spread matrix by matrix.
        dmuon_torch::runDmuonc(f.dmuonc.empty() ? DMUON_STEP_BENCH_DMUONC : f.dmuonc,
                               {manifest, "--mesh", mesh, "--small-param-threshold=0", "-o",
                                optimizer.empty() ? plans.muon : plans.adamw});
      }
    } catch (const std::exception &e) {
      error = e.what();
    }
  }
  int failed = error.empty() ? 0 : 1;
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (failed)
    throw std::runtime_error(rank == 0 ? error : "rank 0 could not compile the plans");
  return plans;
}

struct Variant {
  VariantTimes times;
  std::unique_ptr<StepVariant> impl;
  int nextStep = 0; // the batch it trains on next
};

// Runs `count` steps of `v`, timed unless `warmup`; the loss of the last
// one, averaged over the ranks, is kept (outside the timed phases).
void runSteps(const StepBenchFlags &f, Variant &v, int count, bool warmup, int rank, int world) {
  for (int i = 0; i < count; ++i) {
    const torch::Tensor window = localBatch(f, v.nextStep++, rank, world);
    // Every rank starts the step together; the wait is not the step's.
    MPI_Barrier(MPI_COMM_WORLD);
    double loss = 0;
    const StepTimes t = v.impl->runStep(window, loss);
    if (!warmup) {
      v.times.sum.fwdBwd += t.fwdBwd;
      v.times.sum.comm += t.comm;
      v.times.sum.step += t.step;
      if (v.times.steps == 0 || t.total() < v.times.fastest.total())
        v.times.fastest = t;
      ++v.times.steps;
    }
    double sum = 0;
    MPI_Allreduce(&loss, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    v.times.lastLoss = sum / world;
  }
}

int run(const StepBenchFlags &f, int rank, int world) {
  torch::set_num_threads(f.threads);
  if (f.globalBatch % world != 0)
    throw std::runtime_error("--batch must split evenly over the ranks");
  const std::string mesh = f.mesh.empty() ? std::to_string(world) : f.mesh;
  const Plans paths = compilePlans(f, mesh, rank);
  const dmuon::Plan muonPlan(paths.muon), adamwPlan(paths.adamw);

  OptimizerSettings s; // the kernels' defaults: Muon lr 0.02, mu 0.95, NS5; AdamW 1e-3
  std::vector<Variant> variants(4);
  variants[0].times.label = "adamw/dmuon";
  variants[0].impl = makeDmuonVariant(makeBenchModel(f), adamwPlan, MPI_COMM_WORLD, f.mode, s);
  variants[1].times.label = "muon/dmuon";
  variants[1].impl = makeDmuonVariant(makeBenchModel(f), muonPlan, MPI_COMM_WORLD, f.mode, s);
  variants[2].times.label = "BASELINE 1 all-reduce + NS all";
  variants[2].impl = makeAllReduceBaseline(makeBenchModel(f), muonPlan, MPI_COMM_WORLD, s);
  variants[3].times.label = "BASELINE 2 ZeRO-1 gather + NS all";
  variants[3].impl = makeZero1GatherBaseline(makeBenchModel(f), muonPlan, MPI_COMM_WORLD, s);

  if (rank == 0) {
    int muonMatrices = 0;
    int64_t params = 0;
    for (int i = 0; i < muonPlan.numParams(); ++i) {
      const dmuon_param_info_t p = muonPlan.param(i);
      params += p.numel;
      muonMatrices += p.role == DMUON_ROLE_MUON;
    }
    std::printf("dmuon_step_bench: %s; %.2f M params, %d on Muon (%d hook groups)\n",
                describeModel(f).c_str(), double(params) / 1e6, muonMatrices,
                muonPlan.numHookGroups());
    std::printf("  %d ranks, mesh %s, %s, global batch %lld x %lld tokens; %d warmup + %d timed "
                "steps per variant in %d rounds\n",
                world, mesh.c_str(), f.mode == DMUON_MODE_Z2 ? "Z2" : "Z3",
                static_cast<long long>(f.globalBatch),
                static_cast<long long>(f.model == ModelKind::Gpt ? f.gpt.context
                                                                 : f.llama.context),
                f.warmup, f.steps, f.rounds);
    std::fflush(stdout);
  }
  for (Variant &v : variants)
    runSteps(f, v, f.warmup, /*warmup=*/true, rank, world);
  for (int r = 0; r < f.rounds; ++r) {
    // The timed steps split as evenly as they go over the rounds.
    const int count = f.steps / f.rounds + (r < f.steps % f.rounds ? 1 : 0);
    for (Variant &v : variants)
      runSteps(f, v, count, /*warmup=*/false, rank, world);
  }

  std::vector<VariantTimes> times;
  for (const Variant &v : variants)
    times.push_back(v.times);
  printReport(times, MPI_COMM_WORLD);

  int rc = 0;
  if (f.expectAgree >= 0 && rank == 0) {
    const double muon = times[1].lastLoss;
    for (size_t i = 2; i < times.size(); ++i) {
      const double rel = std::abs(times[i].lastLoss - muon) / std::abs(muon);
      if (!(rel <= f.expectAgree)) {
        std::fprintf(stderr, "dmuon_step_bench: error: %s's last loss differs from muon/dmuon's "
                             "by %.3g (relative), over %g\n",
                     times[i].label.c_str(), rel, f.expectAgree);
        rc = 1;
      }
    }
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return rc;
}

} // namespace
} // namespace step_bench

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  step_bench::StepBenchFlags flags;
  std::string err;
  if (!step_bench::parseStepBenchFlags(argc, argv, flags, err)) {
    if (rank == 0) {
      std::fprintf(stderr, "dmuon_step_bench: error: %s\n", err.c_str());
      step_bench::printStepBenchUsage(stderr);
    }
    MPI_Finalize();
    return 2;
  }
  int rc = 0;
  try {
    rc = step_bench::run(flags, rank, world);
  } catch (const std::exception &e) {
    // One rank's failure would leave the others waiting in a collective.
    std::fprintf(stderr, "dmuon_step_bench: rank %d: error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
