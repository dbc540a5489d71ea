#include "TinyRuntime.h"

#include <map>
#include <stdexcept>

namespace tiny {

PlanBinding::PlanBinding(const dmuon::Plan &plan, const Config &cfg)
    : specs_(paramSpecs(cfg)), moduleGroup_(static_cast<size_t>(cfg.layers) + 2, -1) {
  std::map<std::string, const ParamSpec *> byName;
  for (const ParamSpec &s : specs_)
    byName[s.name] = &s;
  if (plan.numParams() != static_cast<int>(specs_.size()))
    throw std::runtime_error("plan has " + std::to_string(plan.numParams()) +
                             " params, the tiny model " + std::to_string(specs_.size()));
  for (int i = 0; i < plan.numParams(); ++i) {
    dmuon_param_info_t info = plan.param(i);
    auto it = byName.find(info.name);
    if (it == byName.end())
      throw std::runtime_error(std::string("plan param '") + info.name +
                               "' is not a param of the tiny model");
    const ParamSpec &s = *it->second;
    index_[s.name] = i;
    std::vector<int64_t> shape(info.shape, info.shape + info.ndim);
    if (shape != s.shape)
      throw std::runtime_error(std::string("plan param '") + info.name +
                               "' has another shape than the tiny model's");
    if (info.dtype != DMUON_DTYPE_F32)
      throw std::runtime_error(std::string("plan param '") + info.name +
                               "' is not f32; the tiny model computes in f32");
  }
  for (int g = 0; g < plan.numHookGroups(); ++g) {
    const std::string name = plan.hookGroupName(g);
    int module = name == "embed" ? kEmbedModule : name == "head" ? headModule(cfg) : -2;
    for (int64_t l = 0; l < cfg.layers; ++l)
      if (name == "layers." + std::to_string(l))
        module = static_cast<int>(l);
    if (module < kEmbedModule)
      throw std::runtime_error("hook group '" + name + "' is not a module of the tiny model");
    int &slot = moduleGroup_[static_cast<size_t>(module + 1)];
    if (slot >= 0)
      throw std::runtime_error("two hook groups for module '" + name + "'");
    slot = g;
  }
  // Hook groups must come in forward order, as the runtime's prefetch expects.
  int last = -1;
  for (int g : moduleGroup_)
    if (g >= 0) {
      if (g < last)
        throw std::runtime_error("the plan's hook groups are not in the model's forward order");
      last = g;
    }
}

void bindInitialParams(dmuon::Runtime &rt, const Config &cfg, uint64_t seed) {
  for (const ParamSpec &s : paramSpecs(cfg)) {
    std::vector<float> v = initParam(cfg, s, seed);
    rt.bindParam(s.name, v.data(), s.numel);
  }
}

} // namespace tiny
