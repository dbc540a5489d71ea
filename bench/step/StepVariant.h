// One way to run a training step, timed phase by phase. The benchmark makes
// four (AdamW and Muon through dmuon, two naive Muon baselines) on the same
// model, ranks and batches and lets them take turns.
#ifndef DMUON_BENCH_STEP_STEPVARIANT_H
#define DMUON_BENCH_STEP_STEPVARIANT_H

#include "BenchModel.h"

#include "kernels/Hyper.h"

#include "dmuon/dmuon.hpp"

#include <mpi.h>

#include <chrono>
#include <memory>

namespace step_bench {

// Seconds of one step on this rank. The phases add up to the step's wall time.
struct StepTimes {
  // Forward and backward (the host's compute), without `comm`.
  double fwdBwd = 0;
  // Communication the host waited for outside the optimizer step: for dmuon
  // the wall time inside its pre/post forward/backward hooks (broadcasts,
  // reduces to the owners); for a baseline its blocking gradient collective
  // of the Muon matrices after backward.
  double comm = 0;
  // The optimizer step: dmuon's step() (AdamW all-reduce, owner NS, replicate
  // broadcast, AdamW); a baseline's NS, updates and their collectives.
  double step = 0;
  double total() const { return fwdBwd + comm + step; }
};

// The same hyper-parameters for dmuon and the baselines.
struct OptimizerSettings {
  dmuon::kernels::MuonHyper muon;
  dmuon::kernels::AdamWHyper adamw;
};

class StepVariant {
public:
  virtual ~StepVariant() = default;
  // One step on this rank's slice of the global batch; `loss` gets this
  // rank's loss (outside the timed phases).
  virtual StepTimes runStep(const torch::Tensor &window, double &loss) = 0;
};

inline double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Through libdmuon: the plan decides Muon or AdamW for each param.
std::unique_ptr<StepVariant> makeDmuonVariant(std::unique_ptr<BenchModel> model,
                                              const dmuon::Plan &plan, MPI_Comm comm,
                                              dmuon_mode_t mode, const OptimizerSettings &s);

// Baseline 1: every rank all-reduces every gradient and runs Muon (NS
// included) on every matrix. `plan` only says which params are Muon's.
std::unique_ptr<StepVariant> makeAllReduceBaseline(std::unique_ptr<BenchModel> model,
                                                   const dmuon::Plan &plan, MPI_Comm comm,
                                                   const OptimizerSettings &s);

// Baseline 2, Moonlight's Distributed Muon on ZeRO-1: reduce-scatter of the
// Muon gradients, momentum on the local shard, all-gather of every full
// matrix, NS on every matrix on every rank, update of the local shard,
// all-gather of the params.
std::unique_ptr<StepVariant> makeZero1GatherBaseline(std::unique_ptr<BenchModel> model,
                                                     const dmuon::Plan &plan, MPI_Comm comm,
                                                     const OptimizerSettings &s);

} // namespace step_bench

#endif
