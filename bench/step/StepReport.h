// Gathers the variants' step times over ranks and prints them side by side,
// with the ratios docs/benchmarks.md quotes.
#ifndef DMUON_BENCH_STEP_STEPREPORT_H
#define DMUON_BENCH_STEP_STEPREPORT_H

#include "StepVariant.h"

#include <mpi.h>

#include <string>
#include <vector>

namespace step_bench {

// One variant's sums over its timed steps on this rank.
struct VariantTimes {
  std::string label; // as printed; the baselines' say BASELINE
  StepTimes sum;
  // This rank's timed step with the lowest total: on a machine other jobs
  // load, the figure with the least interference (docs/benchmarks.md).
  StepTimes fastest;
  int steps = 0;
  double lastLoss = 0; // mean over ranks, the last step's
};

// Collective: every rank passes its own sums; rank 0 prints the per-step
// means over steps and ranks of every phase (so the phases add up to the
// total), the slowest rank's total, and the ratios. `variants` is in the
// order adamw/dmuon, muon/dmuon, baseline 1, baseline 2.
void printReport(const std::vector<VariantTimes> &variants, MPI_Comm comm);

} // namespace step_bench

#endif
