#include "dmuon/torch/DmuonOptimizer.h"

#include <cmath>
#include <set>
#include <stdexcept>

namespace dmuon_torch {
namespace {

// The runtime's row behind a group's key, per rule (common/HyperParams.def).
double *row(dmuon_hyper_params_t &h, const std::string &rule, const char *key) {
  const std::string k = key;
  if (rule == "adamw")
    return k == "lr" ? &h.adamw_lr : k == "weight_decay" ? &h.adamw_weight_decay : nullptr;
  if (rule == "soap")
    return k == "lr" ? &h.soap_lr : k == "weight_decay" ? &h.soap_weight_decay : nullptr;
  if (rule == "shampoo")
    return k == "lr" ? &h.shampoo_lr : k == "weight_decay" ? &h.shampoo_weight_decay : nullptr;
  return k == "lr" ? &h.lr : k == "weight_decay" ? &h.weight_decay : &h.momentum;
}

bool hasMomentum(const std::string &rule) { return rule == "muon" || rule == "normuon"; }

DmuonGroupOptions groupOptions(const std::string &rule, dmuon_hyper_params_t h) {
  DmuonGroupOptions o;
  o.rule = rule;
  o.lr = *row(h, rule, "lr");
  o.weightDecay = *row(h, rule, "weight_decay");
  if (hasMomentum(rule))
    o.momentum = h.momentum;
  return o;
}

std::vector<torch::optim::OptimizerParamGroup>
paramGroups(dmuon::Runtime &rt, const dmuon::Plan &plan, const torch::nn::Module &model,
            const std::string &matrixRule) {
  static const std::set<std::string> rules = {"muon", "normuon", "soap", "shampoo"};
  if (!rules.count(matrixRule))
    throw std::invalid_argument("DmuonOptimizer: matrixRule '" + matrixRule +
                                "': expected muon, normuon, soap or shampoo");
  std::vector<torch::Tensor> matrices, others;
  std::set<const c10::TensorImpl *> seen;
  for (const auto &np : model.named_parameters()) {
    if (!seen.insert(np.value().unsafeGetTensorImpl()).second)
      continue; // a tied param's second name
    const int index = plan.findParam(np.key());
    if (plan.paramRoute(index).route == DMUON_ROUTE_HOST)
      continue; // frozen: the runtime does not step it
    (plan.param(index).role == DMUON_ROLE_MUON ? matrices : others).push_back(np.value());
  }
  const dmuon_hyper_params_t h = rt.hyperParams();
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!matrices.empty())
    groups.emplace_back(matrices, std::make_unique<DmuonGroupOptions>(groupOptions(matrixRule, h)));
  if (!others.empty())
    groups.emplace_back(others, std::make_unique<DmuonGroupOptions>(groupOptions("adamw", h)));
  if (groups.empty())
    throw std::invalid_argument("DmuonOptimizer: the model has no param the runtime steps");
  return groups;
}

} // namespace

DmuonOptimizer::DmuonOptimizer(dmuon::Runtime &rt, const dmuon::Plan &plan, ParamBridge &bridge,
                               const torch::nn::Module &model, const std::string &matrixRule)
    : torch::optim::Optimizer(paramGroups(rt, plan, model, matrixRule),
                              std::make_unique<DmuonGroupOptions>()),
      rt_(rt), bridge_(bridge) {
  for (auto &g : param_groups())
    applied_.push_back(static_cast<DmuonGroupOptions &>(g.options()));
}

DmuonGroupOptions &DmuonOptimizer::group(const std::string &rule) {
  for (auto &g : param_groups()) {
    auto &o = static_cast<DmuonGroupOptions &>(g.options());
    if (o.rule == rule)
      return o;
  }
  throw std::invalid_argument("DmuonOptimizer: no param group '" + rule + "'");
}

void DmuonOptimizer::sendChangedRows() {
  dmuon_hyper_params_t h;
  dmuon_hyper_params_init(&h); // every row NaN: unchanged
  bool changed = false;
  auto &groups = param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto &now = static_cast<const DmuonGroupOptions &>(groups[i].options());
    const DmuonGroupOptions &was = applied_[i];
    auto take = [&](const char *key, double value, double before) {
      if (std::isnan(value))
        throw std::invalid_argument("DmuonOptimizer: group '" + now.rule + "' " + key +
                                    " is NaN");
      if (value != before) {
        *row(h, now.rule, key) = value;
        changed = true;
      }
    };
    take("lr", now.lr, was.lr);
    take("weight_decay", now.weightDecay, was.weightDecay);
    if (now.momentum.has_value() != was.momentum.has_value())
      throw std::invalid_argument("DmuonOptimizer: group '" + now.rule +
                                  "' has no momentum row to set");
    if (now.momentum)
      take("momentum", *now.momentum, *was.momentum);
  }
  if (!changed)
    return;
  rt_.setHyperParams(h);
  for (size_t i = 0; i < groups.size(); ++i)
    applied_[i] = static_cast<const DmuonGroupOptions &>(groups[i].options());
}

torch::Tensor DmuonOptimizer::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  sendChangedRows();
  bridge_.endBackward();
  lastStepApplied_ = rt_.step();
  return loss;
}

} // namespace dmuon_torch
