#include "GptModel.h"

#include <cmath>
#include <stdexcept>

namespace gpt {
namespace {

torch::nn::Linear linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

} // namespace

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor &x) {
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_) * weight_;
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig &cfg) : heads_(cfg.heads) {
  if (cfg.dModel % cfg.heads != 0)
    throw std::invalid_argument("d_model must be a multiple of the number of heads");
  q_ = register_module("q", linear(cfg.dModel, cfg.dModel));
  k_ = register_module("k", linear(cfg.dModel, cfg.dModel));
  v_ = register_module("v", linear(cfg.dModel, cfg.dModel));
  o_ = register_module("o", linear(cfg.dModel, cfg.dModel));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor &x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads_;
  auto split = [&](const torch::Tensor &t) { return t.view({B, T, heads_, hd}).transpose(1, 2); };
  torch::Tensor q = split(q_(x)), k = split(k_(x)), v = split(v_(x));
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
  // libtorch 1.13 has no scaled_dot_product_attention: mask the future by hand.
  torch::Tensor future = torch::ones({T, T}, torch::kBool).triu(1);
  att = torch::softmax(att.masked_fill(future, -INFINITY), -1);
  torch::Tensor y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
  return o_(y);
}

MlpImpl::MlpImpl(const GptConfig &cfg) {
  up_ = register_module("up", linear(cfg.dModel, cfg.mlpMult * cfg.dModel));
  down_ = register_module("down", linear(cfg.mlpMult * cfg.dModel, cfg.dModel));
}

torch::Tensor MlpImpl::forward(const torch::Tensor &x) { return down_(torch::gelu(up_(x))); }

BlockImpl::BlockImpl(const GptConfig &cfg) {
  // Registration order is forward order: it becomes the manifest's order.
  norm1_ = register_module("norm1", RMSNorm(cfg.dModel));
  attn_ = register_module("attn", CausalSelfAttention(cfg));
  norm2_ = register_module("norm2", RMSNorm(cfg.dModel));
  mlp_ = register_module("mlp", Mlp(cfg));
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  x = x + attn_(norm1_(x));
  return x + mlp_(norm2_(x));
}

GptImpl::GptImpl(const GptConfig &cfg) : cfg_(cfg) {
  tokEmbed_ = register_module("tok_embed", torch::nn::Embedding(cfg.vocab, cfg.dModel));
  posEmbed_ = register_module("pos_embed", torch::nn::Embedding(cfg.context, cfg.dModel));
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < cfg.layers; ++l)
    layers_->push_back(Block(cfg));
  norm_ = register_module("norm", RMSNorm(cfg.dModel));
  head_ = register_module("head", linear(cfg.dModel, cfg.vocab));
}

torch::Tensor GptImpl::forward(const torch::Tensor &tokens, BlockHooks *hooks) {
  const int64_t T = tokens.size(1);
  if (T > cfg_.context)
    throw std::invalid_argument("sequence longer than the context");
  // Every module that holds params runs between its hooks: the blocks, and
  // the root-level embeddings, final norm and head (their own hook groups
  // when the runtime moves them).
  auto hooked = [&](const std::string &module, auto &&run) {
    return hookedForward(hooks, module, run);
  };
  torch::Tensor x = hooked("tok_embed", [&] { return tokEmbed_(tokens); }) +
                    hooked("pos_embed", [&] { return posEmbed_(torch::arange(T, torch::kLong)); });
  for (size_t l = 0; l < layers_->size(); ++l)
    x = hooked("layers." + std::to_string(l),
               [&] { return layers_->ptr<BlockImpl>(l)->forward(x); });
  x = hooked("norm", [&] { return norm_(x); });
  return hooked("head", [&] { return head_(x); });
}

torch::Tensor GptImpl::loss(const torch::Tensor &window, BlockHooks *hooks) {
  const int64_t T = window.size(1) - 1;
  torch::Tensor logits = forward(window.slice(1, 0, T), hooks);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, cfg_.vocab}),
                                              window.slice(1, 1, T + 1).reshape({-1}));
}

Gpt makeGpt(const GptConfig &cfg, uint64_t seed) {
  Gpt model(cfg);
  torch::manual_seed(seed);
  initParams(*model, cfg.layers);
  return model;
}

void initParams(torch::nn::Module &model, int64_t layers) {
  torch::NoGradGuard noGrad;
  const double residualStd = 0.02 / std::sqrt(2.0 * double(layers));
  for (auto &np : model.named_parameters()) {
    const std::string &name = np.key();
    torch::Tensor &p = np.value();
    if (p.dim() == 1)
      p.fill_(1.0);
    else if (name.ends_with("attn.o.weight") || name.ends_with("mlp.down.weight"))
      p.normal_(0.0, residualStd);
    else
      p.normal_(0.0, 0.02);
  }
}

} // namespace gpt
