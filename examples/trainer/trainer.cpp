// dmuon-trainer: trains the tiny residual MLP (TinyModel.h) on synthetic
// regression data under MPI with libdmuon: Muon on the layers' matrices, each
// matrix owned by one rank, AdamW on the rest.
//
//   mpirun -n 4 build/bin/dmuon-trainer --plan build/hosts/tiny/tiny-2x2.plan --steps 50
//
// Per step, every rank takes its own equal slice of the global batch, in
// --micro-batches pieces, and for each runs forward with
// pre_forward/post_forward around each layer, backward in reverse with
// pre_backward/post_backward, accumulating gradients into the runtime's
// buffers; then the schedule's learning rates, dmuon_runtime_step (which
// clips), and the loss line with the gradient norm. The command line, the
// loss lines and the end-of-run table are shared with dmuon-trainer-cuda
// (TrainerCommon.h).
#include "TinyModel.h"
#include "TinyRuntime.h"
#include "TrainerCommon.h"

#include "dmuon/dmuon.hpp"

#include <mpi.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {

const tiny::TrainerInfo kInfo = {"dmuon-trainer",
                                 "Trains a tiny residual MLP with libdmuon over MPI_COMM_WORLD.",
                                 /*cuda=*/false};

int run(const tiny::TrainerFlags &flags, tiny::World &world) {
  const int rank = world.rank();
  dmuon::Plan plan(flags.plan);
  tiny::Config cfg;
  tiny::PlanBinding binding(plan, cfg);
  const int64_t local = tiny::localBatch(cfg, world.size());
  if (local % flags.microBatches != 0)
    throw std::runtime_error("each rank's batch of " + std::to_string(local) +
                             " rows does not split into " +
                             std::to_string(flags.microBatches) + " micro-batches");
  const int64_t micro = local / flags.microBatches;

  MPI_Comm comm = MPI_COMM_WORLD;
  dmuon_runtime_options_t opt = tiny::runtimeOptions(flags);
  opt.backend = DMUON_BACKEND_MPI;
  opt.communicator = &comm;
  dmuon::Runtime rt(plan, opt);
  tiny::bindInitialParams(rt, cfg, flags.seed);

  tiny::printRunHeader(kInfo, flags, plan, cfg, world, local);

  tiny::Data data(cfg, flags.seed);
  tiny::Model model(cfg, micro);
  tiny::RuntimeAccess access(rt, binding);
  std::vector<float> x(static_cast<size_t>(micro * cfg.inDim));
  std::vector<float> t(static_cast<size_t>(micro * cfg.outDim));
  const dmuon_hyper_params_t base = rt.hyperParams();

  double first = 0, last = 0;
  for (int step = 0; step < flags.steps; ++step) {
    float mine = 0;
    for (int i = 0; i < flags.microBatches; ++i) {
      if (flags.microBatches > 1)
        rt.beginMicroBatch(i == flags.microBatches - 1);
      data.batch(step, rank * local + i * micro, micro, x.data(), t.data());
      mine += model.forwardBackward(access, x.data(), t.data(), flags.microBatches) /
              static_cast<float>(flags.microBatches);
    }
    const double loss = tiny::stepAndReport(rt, flags, base, step, mine, world);
    if (step == 0)
      first = loss;
    last = loss;
  }
  rt.synchronize();
  return tiny::finishRun(kInfo, flags, rt, world, first, last);
}

} // namespace

int main(int argc, char **argv) { return tiny::trainerMain(argc, argv, kInfo, run); }
