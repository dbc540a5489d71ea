// A torch::optim::Optimizer over the runtime, as dmuon.torch's
// DmuonOptimizer is in Python: param groups a libtorch scheduler
// (torch::optim::StepLR, or any LRScheduler) drives, step(), zero_grad();
// docs/torch.md, "A torch training loop".
//
//   dmuon_torch::ParamBridge bridge(rt, plan, *model);
//   dmuon_torch::DmuonOptimizer opt(rt, plan, bridge, *model);
//   torch::optim::StepLR sched(opt, 100, 0.5);
//   for (...) { bridge.beginStep(); opt.zero_grad(); loss = ...; loss.backward(); opt.step(); sched.step(); }
#ifndef DMUON_TORCH_DMUONOPTIMIZER_H
#define DMUON_TORCH_DMUONOPTIMIZER_H

#include "dmuon/torch/DmuonTorch.h"

#include <torch/optim/optimizer.h>

#include <optional>
#include <string>

namespace dmuon_torch {

// One group's rows the runtime can change between steps: lr and
// weight_decay (the Muon rules' momentum too). `rule` names the group:
// "muon", "normuon", "soap", "shampoo" (the matrices) or "adamw".
struct DmuonGroupOptions : torch::optim::OptimizerCloneableOptions<DmuonGroupOptions> {
  std::string rule;
  double lr = 0, weightDecay = 0;
  std::optional<double> momentum;
  double get_lr() const override { return lr; }
  void set_lr(const double value) override { lr = value; }
};

class DmuonOptimizer : public torch::optim::Optimizer {
public:
  // `matrixRule`: the plan's rule for its matrices (dmuonc's
  // --matrix-optimizer), which names the matrices' group and its rows.
  DmuonOptimizer(dmuon::Runtime &rt, const dmuon::Plan &plan, ParamBridge &bridge,
                 const torch::nn::Module &model, const std::string &matrixRule = "muon");

  // Sends the rows a scheduler or the host changed (collective), finishes
  // the backward and steps. Returns the closure's loss when given one.
  torch::Tensor step(LossClosure closure = nullptr) override;
  // False when the last step was skipped for a non-finite gradient.
  bool lastStepApplied() const { return lastStepApplied_; }
  // Collective: abandons the current step (ParamBridge::abandonStep).
  void abandonStep() { bridge_.abandonStep(); }

  // The groups, for reading and setting rows by name ("muon", "adamw").
  DmuonGroupOptions &group(const std::string &rule);

private:
  void sendChangedRows();

  dmuon::Runtime &rt_;
  ParamBridge &bridge_;
  std::vector<DmuonGroupOptions> applied_;
  bool lastStepApplied_ = true;
};

} // namespace dmuon_torch

#endif
