// What dmuon-trainer (CPU, MPI backend) and dmuon-trainer-cuda (GPU, NCCL
// backend) share: the command line, the world's start-up (TrainerWorld.h)
// and error handling, the
// runtime options taken from the flags, the per-step loss line and the
// end-of-run table. Both trainers print the same lines, so their runs can be
// compared line by line.
#ifndef DMUON_EXAMPLES_TRAINERCOMMON_H
#define DMUON_EXAMPLES_TRAINERCOMMON_H

#include "TinyModel.h"
#include "TrainerWorld.h"

#include "dmuon/dmuon.hpp"

#include <cstdint>
#include <limits>
#include <string>

namespace tiny {

struct TrainerFlags {
  std::string plan;
  int steps = 50;
  double lr = std::numeric_limits<double>::quiet_NaN();      // Muon; NaN: the plan's
  double adamwLr = std::numeric_limits<double>::quiet_NaN(); // NaN: the plan's
  uint64_t seed = 1;
  dmuon_mode_t mode = DMUON_MODE_FROM_PLAN;
  int replicateAsync = -1; // -1: plan, 0: --sync, 1: --async
  double minLossDrop = 0;  // > 0: exit 1 unless first/last loss >= this
  int microBatches = 1;    // gradient accumulation over this many per step
  dmuon_accumulation_t accumulation = DMUON_ACCUMULATION_LOCAL;
  int warmup = 0;          // linear warmup steps of both learning rates
  bool cosine = false;     // cosine decay to 10% by the last step
  double clipGradNorm = 0; // 0: no clipping
  dmuon_clip_policy_t clipPolicy = DMUON_CLIP_ADAMW_ONLY;
  // dmuon-trainer-cuda only (the CPU trainer rejects these flags):
  int device = -1;              // -1: local rank % visible devices
  bool checkAgainstCpu = false; // compare step 0 with the CPU model
};

// Which trainer is running: its name (for usage and messages), its one-line
// description, and whether it takes the CUDA-only flags.
struct TrainerInfo {
  const char *program;
  const char *description;
  bool cuda;
};

// One rank's training run; returns the process exit status.
using TrainerRun = int (*)(const TrainerFlags &flags, World &world);

// The world (openWorld: always MPI for the CPU trainer; for the CUDA trainer
// MPI only under an MPI launcher), flag parsing (usage and exit status 2 on a
// bad command line), run(), and World::abort when run() throws on any rank;
// returns the exit status.
int trainerMain(int argc, char **argv, const TrainerInfo &info, TrainerRun run);

// Runtime options from the flags (mode, replicate, learning rates); the
// caller sets the backend, the communicator and, for NCCL, stream and device.
dmuon_runtime_options_t runtimeOptions(const TrainerFlags &flags);

// Each rank's equal slice of the global batch; throws when it does not split.
int64_t localBatch(const Config &cfg, int world);

// Rank 0 prints the run's first line: plan, ranks, params, batch, steps, then
// `extra` (e.g. ", GPU 0 (NVIDIA H200)").
void printRunHeader(const TrainerInfo &info, const TrainerFlags &flags, const dmuon::Plan &plan,
                    const Config &cfg, const World &world, int64_t localBatch,
                    const std::string &extra = "");

// The schedule's factor on the learning rates at `step` (--warmup, --cosine).
double lrFactor(const TrainerFlags &flags, int step);

// One optimizer step after the step's micro-batches: sets the schedule's
// learning rates (from `base`, the runtime's at the start), steps, and
// returns the global mean loss from each rank's mean over its equal slice (a
// collective over the world); rank 0 prints the step's loss line with
// the gradient norm, and whether it clipped or skipped.
double stepAndReport(dmuon::Runtime &rt, const TrainerFlags &flags,
                     const dmuon_hyper_params_t &base, int step, float mine, World &world);

// After rt.synchronize(): rank 0 prints the loss summary and the per-rank
// table (NS flops, bytes per collective; a collective over the world),
// then --min-loss-drop is checked. Returns 0, or 1 when the loss fell too
// little.
int finishRun(const TrainerInfo &info, const TrainerFlags &flags, dmuon::Runtime &rt,
              World &world, double firstLoss, double lastLoss);

} // namespace tiny

#endif
