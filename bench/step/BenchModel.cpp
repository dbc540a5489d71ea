#include "BenchModel.h"

#include <sstream>

namespace step_bench {
namespace {

class GptBenchModel : public BenchModel {
public:
  explicit GptBenchModel(const StepBenchFlags &f) : model_(gpt::makeGpt(f.gpt, f.seed)) {}
  torch::nn::Module &module() override { return *model_; }
  torch::Tensor loss(const torch::Tensor &window, gpt::BlockHooks *hooks) override {
    return model_->loss(window, hooks);
  }

private:
  gpt::Gpt model_;
};

class LlamaShapedBenchModel : public BenchModel {
public:
  explicit LlamaShapedBenchModel(const StepBenchFlags &f)
      : model_(makeLlamaShaped(f.llama, f.seed)) {}
  torch::nn::Module &module() override { return *model_; }
  torch::Tensor loss(const torch::Tensor &window, gpt::BlockHooks *hooks) override {
    return model_->loss(window, hooks);
  }

private:
  LlamaShaped model_;
};

int64_t vocab(const StepBenchFlags &f) {
  return f.model == ModelKind::Gpt ? f.gpt.vocab : f.llama.vocab;
}

int64_t context(const StepBenchFlags &f) {
  return f.model == ModelKind::Gpt ? f.gpt.context : f.llama.context;
}

} // namespace

std::unique_ptr<BenchModel> makeBenchModel(const StepBenchFlags &f) {
  if (f.model == ModelKind::Gpt)
    return std::make_unique<GptBenchModel>(f);
  return std::make_unique<LlamaShapedBenchModel>(f);
}

std::string modelName(const StepBenchFlags &f) {
  return f.model == ModelKind::Gpt ? "gpt" : "llama-shaped";
}

std::string describeModel(const StepBenchFlags &f) {
  std::ostringstream out;
  if (f.model == ModelKind::Gpt)
    out << "gpt (examples/gpt): d_model " << f.gpt.dModel << ", " << f.gpt.layers << " blocks, "
        << f.gpt.heads << " heads, MLP " << f.gpt.mlpMult << "x, vocab " << f.gpt.vocab;
  else
    out << "llama-shaped: hidden " << f.llama.hidden << ", " << f.llama.layers << " blocks, "
        << f.llama.heads << " query / " << f.llama.kvHeads << " kv heads, ffn " << f.llama.ffn
        << ", vocab " << f.llama.vocab;
  return out.str();
}

torch::Tensor localBatch(const StepBenchFlags &f, int step, int rank, int world) {
  torch::manual_seed(f.seed * 1000003 + uint64_t(step));
  const torch::Tensor global =
      torch::randint(vocab(f), {f.globalBatch, context(f) + 1}, torch::kLong);
  const int64_t local = f.globalBatch / world;
  return global.slice(0, rank * local, (rank + 1) * local);
}

} // namespace step_bench
