// The two models the step benchmark times, behind one interface: the GPT of
// examples/gpt (linked from its library, dmuon_gpt_model) and the
// Llama-shaped model (LlamaShapedModel.h). Every variant gets its own
// instance, made from the same seed, so all start from the same params.
#ifndef DMUON_BENCH_STEP_BENCHMODEL_H
#define DMUON_BENCH_STEP_BENCHMODEL_H

#include "StepBenchFlags.h"

#include <torch/torch.h>

#include <memory>
#include <string>

namespace step_bench {

class BenchModel {
public:
  virtual ~BenchModel() = default;
  virtual torch::nn::Module &module() = 0;
  // Mean next-token loss of window[:, 1:] given window[:, :-1]; `hooks`
  // bracket every block "layers.N" (null: none).
  virtual torch::Tensor loss(const torch::Tensor &window, gpt::BlockHooks *hooks) = 0;
};

std::unique_ptr<BenchModel> makeBenchModel(const StepBenchFlags &flags);

// "gpt" or "llama-shaped", for manifests and the report.
std::string modelName(const StepBenchFlags &flags);
// One line of sizes for the report.
std::string describeModel(const StepBenchFlags &flags);

// This rank's slice [B/world, T+1] of step `step`'s global batch of random
// tokens, the same on every rank and for every variant. Random tokens cost
// what text costs; the benchmark times steps, it does not train.
torch::Tensor localBatch(const StepBenchFlags &flags, int step, int rank, int world);

} // namespace step_bench

#endif
