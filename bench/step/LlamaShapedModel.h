// A Llama-shaped decoder for the step benchmark, small enough for 2 cores:
// the block matrices keep the aspect ratios of Llama 3.1 8B
// (examples/models/llama-3.1-8b.toml) -- q and o square, k and v a quarter
// of the hidden size (grouped-query attention, 4 query heads per key/value
// head), gate and up hidden x 3.5 hidden, down their transpose -- so that
// Newton-Schulz and the owners' schedule see the same shapes as on the real
// model, scaled down. It exists because the GPT example's model (GptModel.h)
// has no GQA, no gated MLP and an integer MLP multiple.
//
// Block: RMSNorm -> causal GQA self-attention -> RMSNorm -> SwiGLU MLP, as
// Llama, but without rotary embeddings (they have no params and cost little)
// and with a byte-sized vocabulary by default (see docs/benchmarks.md).
// Param names follow GptModel's conventions so that dmuonc's defaults apply
// the same way: tok_embed.weight, layers.N.{attn_norm, attn.{q,k,v,o},
// mlp_norm, mlp.{gate,up,down}}.weight, norm.weight, head.weight.
#ifndef DMUON_BENCH_STEP_LLAMASHAPEDMODEL_H
#define DMUON_BENCH_STEP_LLAMASHAPEDMODEL_H

#include "GptModel.h"

#include <torch/torch.h>

#include <cstdint>

namespace step_bench {

struct LlamaShapedConfig {
  int64_t vocab = 1024;
  int64_t context = 64;
  int64_t hidden = 256; // Llama 3.1 8B: 4096
  int64_t layers = 4;
  int64_t heads = 4;   // query heads of hidden / heads (8B: 32 of 128)
  int64_t kvHeads = 1; // key/value heads (8B: 8): 4 query heads share one
  int64_t ffn = 896;   // 3.5 x hidden (8B: 14336)
};

class GqaAttentionImpl : public torch::nn::Module {
public:
  explicit GqaAttentionImpl(const LlamaShapedConfig &cfg);
  torch::Tensor forward(const torch::Tensor &x);

private:
  int64_t heads_, kvHeads_;
  torch::nn::Linear q_{nullptr}, k_{nullptr}, v_{nullptr}, o_{nullptr};
};
TORCH_MODULE(GqaAttention);

class SwiGluImpl : public torch::nn::Module {
public:
  explicit SwiGluImpl(const LlamaShapedConfig &cfg);
  torch::Tensor forward(const torch::Tensor &x);

private:
  torch::nn::Linear gate_{nullptr}, up_{nullptr}, down_{nullptr};
};
TORCH_MODULE(SwiGlu);

class LlamaBlockImpl : public torch::nn::Module {
public:
  explicit LlamaBlockImpl(const LlamaShapedConfig &cfg);
  torch::Tensor forward(torch::Tensor x);

private:
  gpt::RMSNorm attnNorm_{nullptr}, mlpNorm_{nullptr};
  GqaAttention attn_{nullptr};
  SwiGlu mlp_{nullptr};
};
TORCH_MODULE(LlamaBlock);

class LlamaShapedImpl : public torch::nn::Module {
public:
  explicit LlamaShapedImpl(const LlamaShapedConfig &cfg);
  // Mean next-token cross-entropy of window[:, 1:] given window[:, :-1];
  // `hooks` bracket every block, as in gpt::GptImpl.
  torch::Tensor loss(const torch::Tensor &window, gpt::BlockHooks *hooks = nullptr);

private:
  LlamaShapedConfig cfg_;
  torch::nn::Embedding tokEmbed_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  gpt::RMSNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(LlamaShaped);

// Deterministic for a seed, as gpt::makeGpt: N(0, 0.02) for embeddings and
// matrices, N(0, 0.02/sqrt(2*layers)) for attn.o and mlp.down, ones for norms.
LlamaShaped makeLlamaShaped(const LlamaShapedConfig &cfg, uint64_t seed);

} // namespace step_bench

#endif
