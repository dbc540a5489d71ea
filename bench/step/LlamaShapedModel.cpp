#include "LlamaShapedModel.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace step_bench {
namespace {

torch::nn::Linear linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

} // namespace

GqaAttentionImpl::GqaAttentionImpl(const LlamaShapedConfig &cfg)
    : heads_(cfg.heads), kvHeads_(cfg.kvHeads) {
  if (cfg.hidden % cfg.heads != 0 || cfg.heads % cfg.kvHeads != 0)
    throw std::invalid_argument("hidden must be a multiple of heads, heads of kv heads");
  const int64_t kvDim = cfg.hidden / cfg.heads * cfg.kvHeads;
  q_ = register_module("q", linear(cfg.hidden, cfg.hidden));
  k_ = register_module("k", linear(cfg.hidden, kvDim));
  v_ = register_module("v", linear(cfg.hidden, kvDim));
  o_ = register_module("o", linear(cfg.hidden, cfg.hidden));
}

torch::Tensor GqaAttentionImpl::forward(const torch::Tensor &x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads_;
  const int64_t group = heads_ / kvHeads_;
  torch::Tensor q = q_(x).view({B, T, heads_, hd}).transpose(1, 2);
  // Each key/value head serves `group` query heads: repeat it along heads.
  auto expandKv = [&](const torch::Tensor &t) {
    return t.view({B, T, kvHeads_, 1, hd})
        .expand({B, T, kvHeads_, group, hd})
        .reshape({B, T, heads_, hd})
        .transpose(1, 2);
  };
  torch::Tensor k = expandKv(k_(x)), v = expandKv(v_(x));
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
  torch::Tensor future = torch::ones({T, T}, torch::kBool).triu(1);
  att = torch::softmax(att.masked_fill(future, -INFINITY), -1);
  return o_(torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C}));
}

SwiGluImpl::SwiGluImpl(const LlamaShapedConfig &cfg) {
  gate_ = register_module("gate", linear(cfg.hidden, cfg.ffn));
  up_ = register_module("up", linear(cfg.hidden, cfg.ffn));
  down_ = register_module("down", linear(cfg.ffn, cfg.hidden));
}

torch::Tensor SwiGluImpl::forward(const torch::Tensor &x) {
  return down_(torch::silu(gate_(x)) * up_(x));
}

LlamaBlockImpl::LlamaBlockImpl(const LlamaShapedConfig &cfg) {
  // Registration order is forward order: it becomes the manifest's order.
  attnNorm_ = register_module("attn_norm", gpt::RMSNorm(cfg.hidden));
  attn_ = register_module("attn", GqaAttention(cfg));
  mlpNorm_ = register_module("mlp_norm", gpt::RMSNorm(cfg.hidden));
  mlp_ = register_module("mlp", SwiGlu(cfg));
}

torch::Tensor LlamaBlockImpl::forward(torch::Tensor x) {
  x = x + attn_(attnNorm_(x));
  return x + mlp_(mlpNorm_(x));
}

LlamaShapedImpl::LlamaShapedImpl(const LlamaShapedConfig &cfg) : cfg_(cfg) {
  tokEmbed_ = register_module("tok_embed", torch::nn::Embedding(cfg.vocab, cfg.hidden));
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < cfg.layers; ++l)
    layers_->push_back(LlamaBlock(cfg));
  norm_ = register_module("norm", gpt::RMSNorm(cfg.hidden));
  head_ = register_module("head", linear(cfg.hidden, cfg.vocab));
}

torch::Tensor LlamaShapedImpl::loss(const torch::Tensor &window, gpt::BlockHooks *hooks) {
  const int64_t T = window.size(1) - 1;
  if (T > cfg_.context)
    throw std::invalid_argument("sequence longer than the context");
  // Every module holding params runs between its hooks (the root-level
  // ones have hook groups of their own under the default routes).
  auto hooked = [&](const std::string &module, auto &&run) {
    return gpt::hookedForward(hooks, module, run);
  };
  torch::Tensor x = hooked("tok_embed", [&] { return tokEmbed_(window.slice(1, 0, T)); });
  for (size_t l = 0; l < layers_->size(); ++l)
    x = hooked("layers." + std::to_string(l),
               [&] { return layers_->ptr<LlamaBlockImpl>(l)->forward(x); });
  x = hooked("norm", [&] { return norm_(x); });
  torch::Tensor logits = hooked("head", [&] { return head_(x); });
  return torch::nn::functional::cross_entropy(logits.reshape({-1, cfg_.vocab}),
                                              window.slice(1, 1, T + 1).reshape({-1}));
}

LlamaShaped makeLlamaShaped(const LlamaShapedConfig &cfg, uint64_t seed) {
  LlamaShaped model(cfg);
  torch::manual_seed(seed);
  gpt::initParams(*model, cfg.layers);
  return model;
}

} // namespace step_bench
