// dmuon-gpt: trains a small byte-level GPT (GptModel.h) on Debian's fortune
// databases, with libdmuon over MPI or, for comparison, in one process with
// libtorch's own optimizers and a libtorch Muon.
//
//   mpirun -n 4 build/bin/dmuon-gpt --mesh 2x2 --steps 300 --out runs/muon-2x2
//   mpirun -n 1 build/bin/dmuon-gpt --backend reference --steps 300 --out runs/muon-ref
//
// At start-up rank 0 writes the model's manifest from named_parameters() and
// compiles it with dmuonc for the mesh; every rank then loads the plan. Per
// step every rank takes its own equal slice of the same global batch, so the
// averaged gradient is the gradient of the global batch, which the
// reference sees whole.
#include "FortuneData.h"
#include "GptBackends.h"
#include "GptFlags.h"
#include "GptModel.h"
#include "RunRecord.h"
#include "dmuon/torch/DmuonTorch.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace gpt {
namespace {

double meanOverRanks(double mine, int world) {
  double sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / world;
}

// Rank 0 writes the manifest and runs dmuonc; every rank learns whether it
// worked (so that none waits for a plan that will not come).
std::string compilePlan(const GptFlags &f, const torch::nn::Module &model, const std::string &mesh,
                        int rank) {
  const std::string manifest = f.work + "/gpt.toml";
  const std::string plan = f.work + "/gpt-" + mesh + ".plan";
  std::string error;
  if (rank == 0) {
    try {
      std::filesystem::create_directories(f.work);
      dmuon_torch::ManifestOptions mo;
      mo.modelName = "gpt";
      mo.optimizer = f.optimizer == "adamw" ? "adamw" : "";
      std::ofstream(manifest) << dmuon_torch::manifestToml(model, mo);
      // Threshold 0: every matrix its own unit, so the owners spread over the
      // ranks matrix by matrix rather than layer by layer.
      std::vector<std::string> args = {manifest, "--mesh", mesh, "--small-param-threshold=0",
                                       "-o", plan};
      if (f.optimizer != "muon" && f.optimizer != "adamw")
        args.push_back("--matrix-optimizer=" + f.optimizer);
      args.insert(args.end(), f.dmuoncArgs.begin(), f.dmuoncArgs.end());
      dmuon_torch::runDmuonc(f.dmuonc.empty() ? DMUON_GPT_DMUONC : f.dmuonc, args);
    } catch (const std::exception &e) {
      error = e.what();
    }
  }
  int failed = error.empty() ? 0 : 1;
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (failed)
    throw std::runtime_error(rank == 0 ? error : "rank 0 could not compile the plan");
  return plan;
}

// The learning rates of step `step`: constant for now; a schedule goes here.
StepSettings settingsAt(int step, const GptFlags &f) {
  const double warm = step < f.warmup ? static_cast<double>(step + 1) / f.warmup : 1.0;
  return {f.lr * warm, f.adamwLr * warm};
}

int run(const GptFlags &f, int rank, int world) {
  torch::set_num_threads(f.threads);
  const bool reference = f.backend == "reference";
  if (reference && world != 1)
    throw std::runtime_error("--backend reference runs in one process (mpirun -n 1)");
  if (reference && f.optimizer != "muon" && f.optimizer != "adamw")
    throw std::runtime_error("--backend reference runs --optimizer muon or adamw, not " +
                             f.optimizer);
  if (f.globalBatch % world != 0 || f.valWindows % world != 0)
    throw std::runtime_error("--batch and --val-windows must split evenly over the ranks");
  const int64_t local = f.globalBatch / world, localVal = f.valWindows / world;
  const int64_t window = f.model.context + 1;

  FortuneData data(f.data.empty() ? FortuneData::kDefaultDir : f.data);
  Gpt model = makeGpt(f.model, f.seed);
  const std::string mesh = reference ? "1" : (f.mesh.empty() ? std::to_string(world) : f.mesh);
  dmuon::Plan plan(compilePlan(f, *model, mesh, rank));
  std::unique_ptr<TrainBackend> backend =
      reference ? makeReferenceBackend(f, model, plan)
                : makeDmuonBackend(f, model, plan, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("dmuon-gpt: %s backend, %s, mesh %s, %d ranks, %d params (%d hook groups), "
                "%zu fortune files (%zu / %zu bytes train / validation), global batch %lld x %lld "
                "tokens, %d steps\n",
                f.backend.c_str(), f.optimizer.c_str(), mesh.c_str(), world, plan.numParams(),
                plan.numHookGroups(), data.files(), data.train().size(), data.validation().size(),
                static_cast<long long>(f.globalBatch), static_cast<long long>(f.model.context),
                f.steps);

  auto validationLoss = [&] {
    Gpt m = backend->evalModel(); // collective for dmuon
    torch::NoGradGuard noGrad;
    const torch::Tensor w = data.validationBatch(f.valWindows, rank * localVal, localVal, window);
    return meanOverRanks(m->loss(w).item<double>(), world);
  };

  std::vector<LossRow> rows;
  for (int step = 0; step <= f.steps; ++step) {
    LossRow row;
    row.step = step;
    if (step % f.evalEvery == 0 || step == f.steps)
      row.val = validationLoss();
    if (step < f.steps) {
      const auto t0 = std::chrono::steady_clock::now();
      backend->beginStep(settingsAt(step, f));
      const torch::Tensor x = data.trainBatch(f.seed, step, rank * local, local, window);
      torch::Tensor loss = model->loss(x, backend->hooks());
      loss.backward();
      backend->endBackward();
      backend->step();
      row.train = meanOverRanks(loss.item<double>(), world);
      row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    rows.push_back(row);
    if (rank == 0) {
      std::printf("step %4d", step);
      if (row.train)
        std::printf("  loss %.6f  (%.2f s)", *row.train, *row.seconds);
      if (row.val)
        std::printf("  val %.6f", *row.val);
      std::printf("\n");
      std::fflush(stdout);
    }
  }

  Gpt final = backend->evalModel(); // collective for dmuon
  int rc = 0;
  if (rank == 0) {
    if (!f.out.empty()) {
      std::filesystem::create_directories(f.out);
      writeLossCsv(f.out + "/loss.csv", rows);
      saveParams(f.out + "/params.pt", *final);
    }
    if (!f.compareTo.empty() && !compareWithRun(f.compareTo, rows, *final, f.rtol)) {
      std::fprintf(stderr, "dmuon-gpt: error: the run differs from %s\n", f.compareTo.c_str());
      rc = 1;
    }
    const double first = *rows.front().val, last = *rows.back().val;
    std::printf("validation loss: %.6f -> %.6f\n", first, last);
    if (f.expectValDrop && !(last < first)) {
      std::fprintf(stderr, "dmuon-gpt: error: the validation loss did not fall\n");
      rc = 1;
    }
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return rc;
}

} // namespace
} // namespace gpt

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  gpt::GptFlags flags;
  std::string err;
  if (!gpt::parseGptFlags(argc, argv, flags, err)) {
    if (rank == 0) {
      std::fprintf(stderr, "dmuon-gpt: error: %s\n", err.c_str());
      gpt::printGptUsage(stderr);
    }
    MPI_Finalize();
    return 2;
  }
  int rc = 0;
  try {
    rc = gpt::run(flags, rank, world);
  } catch (const std::exception &e) {
    // One rank's failure would leave the others waiting in a collective.
    std::fprintf(stderr, "dmuon-gpt: rank %d: error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
