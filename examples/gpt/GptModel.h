// A small decoder-only transformer in libtorch's C++ API (CPU, fp32): token
// and position embeddings, N pre-norm blocks (RMSNorm -> causal multi-head
// self-attention with separate q/k/v/o projections -> RMSNorm -> GELU MLP),
// a final RMSNorm and an untied output head. No biases.
//
// Parameter names are the usual module paths, in forward order:
//   tok_embed.weight, pos_embed.weight,
//   layers.N.norm1.weight, layers.N.attn.{q,k,v,o}.weight,
//   layers.N.norm2.weight, layers.N.mlp.{up,down}.weight,
//   norm.weight, head.weight
// so that dmuonc's defaults apply: 2-D block matrices -> Muon, embeddings,
// head and norms -> AdamW ("tok_embed" rather than "tok_emb": the default
// exclusion matches path components named embed*, head, wte, ...), and each
// layers.N is one hook group.
//
// The model knows nothing about dmuon: a trainer that shards its params
// passes BlockHooks to forward(), which brackets every block with them.
#ifndef DMUON_EXAMPLES_GPT_GPTMODEL_H
#define DMUON_EXAMPLES_GPT_GPTMODEL_H

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace gpt {

struct GptConfig {
  int64_t vocab = 256; // byte-level tokens
  int64_t context = 64;
  int64_t dModel = 128;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t mlpMult = 4;
};

// Called around the forward of each module that holds params; `module` is
// its path ("tok_embed", "layers.3", "head"). after() returns the tensor the
// model continues with, so it can attach autograd hooks to its output.
class BlockHooks {
public:
  virtual ~BlockHooks() = default;
  virtual void before(const std::string &module) = 0;
  virtual torch::Tensor after(const std::string &module, torch::Tensor out) = 0;
};

// Runs `run` (a module's forward) between hooks->before(module) and
// hooks->after(module, out); with no hooks, just runs it.
template <typename Run>
torch::Tensor hookedForward(BlockHooks *hooks, const std::string &module, Run &&run) {
  if (hooks)
    hooks->before(module);
  torch::Tensor out = run();
  return hooks ? hooks->after(module, out) : out;
}

// GPT-2's initialization: norms at 1, residual output projections
// (attn.o, mlp.down) scaled down by sqrt(2 layers), the rest N(0, 0.02).
void initParams(torch::nn::Module &model, int64_t layers);

class RMSNormImpl : public torch::nn::Module {
public:
  explicit RMSNormImpl(int64_t dim, double eps = 1e-6);
  torch::Tensor forward(const torch::Tensor &x);

private:
  torch::Tensor weight_;
  double eps_;
};
TORCH_MODULE(RMSNorm);

class CausalSelfAttentionImpl : public torch::nn::Module {
public:
  explicit CausalSelfAttentionImpl(const GptConfig &cfg);
  torch::Tensor forward(const torch::Tensor &x);

private:
  int64_t heads_;
  torch::nn::Linear q_{nullptr}, k_{nullptr}, v_{nullptr}, o_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
public:
  explicit MlpImpl(const GptConfig &cfg);
  torch::Tensor forward(const torch::Tensor &x);

private:
  torch::nn::Linear up_{nullptr}, down_{nullptr};
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
public:
  explicit BlockImpl(const GptConfig &cfg);
  torch::Tensor forward(torch::Tensor x);

private:
  RMSNorm norm1_{nullptr}, norm2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
public:
  explicit GptImpl(const GptConfig &cfg);
  // Logits [B, T, vocab] for tokens [B, T] (T <= context).
  torch::Tensor forward(const torch::Tensor &tokens, BlockHooks *hooks = nullptr);
  // Mean next-token cross-entropy of tokens[:, 1:] given tokens[:, :-1].
  torch::Tensor loss(const torch::Tensor &window, BlockHooks *hooks = nullptr);
  const GptConfig &config() const { return cfg_; }

private:
  GptConfig cfg_;
  torch::nn::Embedding tokEmbed_{nullptr}, posEmbed_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  RMSNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Gpt);

// GPT-2's initialization, deterministic for a seed (the same on every rank
// and in the single-process reference): N(0, 0.02) for embeddings and
// matrices, N(0, 0.02/sqrt(2*layers)) for the projections that write into
// the residual stream (attn.o, mlp.down), ones for the norms.
Gpt makeGpt(const GptConfig &cfg, uint64_t seed);

} // namespace gpt

#endif
