// dmuon_step_bench's command line.
#ifndef DMUON_BENCH_STEP_STEPBENCHFLAGS_H
#define DMUON_BENCH_STEP_STEPBENCHFLAGS_H

#include "GptModel.h"
#include "LlamaShapedModel.h"

#include "dmuon/dmuon.h"

#include <cstdint>
#include <cstdio>
#include <string>

namespace step_bench {

enum class ModelKind { Gpt, LlamaShaped };

struct StepBenchFlags {
  ModelKind model = ModelKind::Gpt;
  gpt::GptConfig gpt;        // examples/gpt's defaults
  LlamaShapedConfig llama;   // Llama 3.1 8B's aspect ratios, hidden 256
  int64_t globalBatch = 16;  // windows per step, split evenly over the ranks
  int warmup = 2;            // untimed steps per variant before the first round
  int steps = 10;            // timed steps per variant, over all rounds
  int rounds = 2;            // the variants take turns this many times
  std::string mesh;          // dmuonc's --mesh; default: the world size (1-D)
  dmuon_mode_t mode = DMUON_MODE_Z3;
  uint64_t seed = 1;
  int threads = 1;           // libtorch intra-op threads per process
  std::string work = "step-bench-work"; // manifests and plans
  std::string dmuonc;        // default: the build's
  // >= 0: exit 1 unless both baselines' last loss equals dmuon Muon's within
  // this relative tolerance (they run the same Muon on the same batches).
  double expectAgree = -1;
};

// Parses argv; on --help prints usage and exits 0; on an error fills `err`.
bool parseStepBenchFlags(int argc, char **argv, StepBenchFlags &flags, std::string &err);
void printStepBenchUsage(FILE *out);

} // namespace step_bench

#endif
