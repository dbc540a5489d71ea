// A model's module hooks (GptModel.h's BlockHooks) forwarded to the
// libtorch bridge (dmuon::torch, DmuonTorch.h): the glue every libtorch model of this
// family needs to run its forward through the runtime's hooks.
#ifndef DMUON_EXAMPLES_GPT_BRIDGEHOOKS_H
#define DMUON_EXAMPLES_GPT_BRIDGEHOOKS_H

#include "GptModel.h"
#include "dmuon/torch/DmuonTorch.h"

#include <string>

namespace gpt {

class BridgeHooks : public BlockHooks {
public:
  explicit BridgeHooks(dmuon_torch::ParamBridge &bridge) : bridge_(bridge) {}
  void before(const std::string &module) override { bridge_.preForward(module); }
  torch::Tensor after(const std::string &module, torch::Tensor out) override {
    return bridge_.postForward(module, std::move(out));
  }

private:
  dmuon_torch::ParamBridge &bridge_;
};

} // namespace gpt

#endif
