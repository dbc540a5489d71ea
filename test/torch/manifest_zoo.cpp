// Writes dmuon::torch's manifest of two libtorch models into the directory
// argv[1] (convnet.toml, tiedlm.toml), for torch_manifest_parity.py to
// compare with dmuon.torch's manifest of the same models written in Python:
// one plan whichever host a user brings (conv views, a frozen layer, a tied
// embedding, a fused qkv and a Conv1D-style c_attn).
#include "dmuon/torch/DmuonTorch.h"

#include <fstream>
#include <iostream>

namespace {

struct ConvNet : torch::nn::Module {
  ConvNet() {
    register_module("stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3)));
    auto blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 2; ++i)
      blocks->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 8, 3)));
    auto frozen = register_module("frozen", torch::nn::Linear(8, 8));
    for (auto &p : frozen->parameters())
      p.set_requires_grad(false);
    register_module("head", torch::nn::Linear(8, 10));
  }
};

// transformers' Conv1D: the weight stored [in, out].
struct Conv1D : torch::nn::Module {
  Conv1D(int64_t in, int64_t out) {
    register_parameter("weight", torch::zeros({in, out}));
    register_parameter("bias", torch::zeros({out}));
  }
};

struct Attention : torch::nn::Module {
  Attention() {
    register_module("qkv", torch::nn::Linear(32, 96));
    register_module("c_attn", std::make_shared<Conv1D>(32, 96));
  }
};

// An output head over a weight it does not own (tie_word_embeddings).
struct TiedHead : torch::nn::Module {
  explicit TiedHead(const torch::Tensor &weight) { register_parameter("weight", weight); }
};

struct TiedLm : torch::nn::Module {
  TiedLm() {
    auto wte = register_module("wte", torch::nn::Embedding(64, 32));
    register_module("attn", std::make_shared<Attention>());
    register_module("lm_head", std::make_shared<TiedHead>(wte->weight));
  }
};

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  std::ofstream(dir + "/convnet.toml") << dmuon_torch::manifestToml(ConvNet(), {"convnet", ""});
  std::ofstream(dir + "/tiedlm.toml") << dmuon_torch::manifestToml(TiedLm(), {"tiedlm", ""});
  return 0;
}
