// Glue between the tiny model and libdmuon: binds the model's params to a
// runtime and serves them to the model through the runtime's views, running
// the runtime's hooks around each layer. Shared by dmuon-trainer and the
// distributed tests.
#ifndef DMUON_HOSTS_TINY_TINYRUNTIME_H
#define DMUON_HOSTS_TINY_TINYRUNTIME_H

#include "TinyModel.h"

#include "dmuon/dmuon.hpp"

#include <map>
#include <string>
#include <vector>

namespace tiny {

// Checks that the plan describes this model (same names, shapes, f32) and
// maps every hook group of the plan to the module it is named after
// (`embed`, `layers.N`, `head`). Throws std::runtime_error with a message on
// any mismatch.
class PlanBinding {
public:
  PlanBinding(const dmuon::Plan &plan, const Config &cfg);
  // Hook group of module l (TinyModel.h), or -1 if it has none.
  int hookGroupOfLayer(int l) const { return moduleGroup_[static_cast<size_t>(l + 1)]; }
  const std::vector<ParamSpec> &specs() const { return specs_; }
  // The plan index of a model param (the runtime's views take it).
  int paramIndex(const std::string &name) const { return index_.at(name); }

private:
  std::vector<ParamSpec> specs_;
  std::vector<int> moduleGroup_; // by module index + 1
  std::map<std::string, int> index_;
};

// Gives every param its deterministic initial values (the same on all ranks).
void bindInitialParams(dmuon::Runtime &rt, const Config &cfg, uint64_t seed);

// ParamAccess over a runtime: views for params, the runtime's gradient
// buffers for gradients, pre/post forward/backward hooks around layers.
class RuntimeAccess : public ParamAccess {
public:
  RuntimeAccess(dmuon::Runtime &rt, const PlanBinding &binding) : rt_(rt), binding_(binding) {}
  const float *param(const std::string &name) override {
    return static_cast<const float *>(rt_.paramView(binding_.paramIndex(name)));
  }
  float *grad(const std::string &name) override {
    return rt_.gradView(binding_.paramIndex(name));
  }
  void beforeLayerForward(int l) override {
    if (int g = binding_.hookGroupOfLayer(l); g >= 0)
      rt_.preForward(g);
  }
  void afterLayerForward(int l) override {
    if (int g = binding_.hookGroupOfLayer(l); g >= 0)
      rt_.postForward(g);
  }
  void beforeLayerBackward(int l) override {
    if (int g = binding_.hookGroupOfLayer(l); g >= 0)
      rt_.preBackward(g);
  }
  void afterLayerBackward(int l) override {
    if (int g = binding_.hookGroupOfLayer(l); g >= 0)
      rt_.postBackward(g);
  }

private:
  dmuon::Runtime &rt_;
  const PlanBinding &binding_;
};

} // namespace tiny

#endif
