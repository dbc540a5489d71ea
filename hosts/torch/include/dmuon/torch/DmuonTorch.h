// libdmuon inside a libtorch trainer: what a host needs, in one header
// (libtorch and dmuon.hpp only; no MPI, nothing of any model). Installed as
// the CMake component dmuon::torch (find_package(dmuon COMPONENTS torch));
// docs/torch.md.
//
// 1. Plan from the model itself: manifestToml() writes dmuonc's TOML
//    manifest from named_parameters() (names, shapes, dtypes, in
//    registration order, which must be forward order), runDmuonc() compiles
//    it for the mesh.
// 2. ParamBridge makes the runtime's memory the model's memory:
//    - every param's storage is re-pointed at the runtime's buffer
//      (param_view) whenever the runtime has one, and at nothing (null) when
//      it has none, so a stray use crashes instead of reading freed memory;
//    - gradients are accumulated by autograd straight into the runtime's
//      fp32 gradient buffers (grad_view): the bridge sets each param's
//      .grad() to a tensor over the buffer, and AccumulateGrad adds into a
//      defined .grad() in place. No copies; the layout is the param's own
//      (contiguous, offset 0), so none are needed;
//    - the hooks: preForward/postForward around each hook group's module
//      (the trainer calls them), pre_backward from an autograd hook on the
//      module's output (runs before any of the module's backward),
//      post_backward from post hooks on the params' gradient accumulators
//      once all of the group's gradients have landed (as DDP's reducer does).
//
// Z3: post_forward frees the packed buffer and pre_backward broadcasts into a
// NEW allocation, but autograd saved tensors that alias the params (e.g.
// weight.t() for a Linear's backward). Those views share the param's
// StorageImpl, not its address, so re-pointing the StorageImpl's data
// pointer at pre_backward moves every saved view with it (the trick
// PyTorch's FSDP plays with storage.resize_(0)). Z2 and Z3 therefore both
// work without recomputation and without a stable address from the runtime.
//
// Requirements: f32 params (the runtime's views are in the plan's dtype and
// its gradients fp32), each param its own contiguous storage at offset 0
// (true for registered module params), and the same forward order on every
// rank (the hooks issue collectives).
#ifndef DMUON_TORCH_DMUONTORCH_H
#define DMUON_TORCH_DMUONTORCH_H

#include "dmuon/dmuon.hpp"

#include <torch/torch.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace dmuon_torch {

struct ManifestOptions {
  std::string modelName = "model";
  // "" or "muon" leaves the choice of matrices to dmuonc's select pass (their
  // rule is dmuonc's --matrix-optimizer); "adamw" is written as every
  // param's `optimizer` (an all-AdamW baseline, say).
  std::string optimizer;
};

// The hook group of the root module's own params: the host calls
// preForward(kRootGroup) before the model's forward and postForward after.
inline constexpr const char *kRootGroup = "<root>";

// dmuonc's TOML manifest (docs/manifest-format.md) for the module's params,
// as python/dmuon/torch/_manifest.py writes it: conv weights carry their
// conv view, frozen params (requires_grad false) take the host route, a
// fused QKV of three equal blocks is split, a tied param is written once.
std::string manifestToml(const torch::nn::Module &model, const ManifestOptions &options = {});

// Runs `dmuonc args...` and waits; throws std::runtime_error unless it exits
// with status 0 (its diagnostics go to this process's stderr).
void runDmuonc(const std::string &dmuonc, const std::vector<std::string> &args);

class ParamBridge {
public:
  // Binds every param of `model` to `rt` with its current values (which
  // must be the same on every rank), then hands the params' memory over to
  // the runtime. The plan must list exactly the model's params.
  ParamBridge(dmuon::Runtime &rt, const dmuon::Plan &plan, torch::nn::Module &model);
  // Leaves the model's params without memory (null storage): gatherInto() a
  // replica first to keep their values. Destroy the bridge before the runtime.
  ~ParamBridge();
  ParamBridge(const ParamBridge &) = delete;
  ParamBridge &operator=(const ParamBridge &) = delete;

  // The hook group of the module at `path` ("layers.3"), or -1 when it has
  // none (no Muon params).
  int hookGroup(const std::string &path) const;

  // Once per step before forward: the always-valid params (AdamW, which the
  // runtime replicates) and their gradients are re-pointed at the runtime.
  void beginStep();
  // Around the forward of the module at `path`. postForward returns the
  // module's output with the pre_backward hook attached: continue with it.
  // A module without a hook group is ignored; a path that is no module of
  // the model (nor kRootGroup) throws std::invalid_argument. A tied param's
  // group stays open until its last use: call postForward after that use.
  void preForward(const std::string &path);
  torch::Tensor postForward(const std::string &path, torch::Tensor out);
  // Collective: abandons the current step after an exception in forward or
  // backward (dmuon_runtime_abandon_step): every gradient of the step is
  // dropped, nothing applied, every group idle; call beginStep() next.
  void abandonStep();
  // After loss.backward(): post_backward for groups that autograd did not
  // finish (params that got no gradient), in backward order.
  void endBackward();

  // Copies every param's current values (the optimizer's fp32 master) into
  // the same-named params of `copy`, e.g. an evaluation replica. A
  // collective: every rank calls it, between steps.
  void gatherInto(torch::nn::Module &copy);

  // Wall time spent inside the runtime's hook calls (pre/post forward and
  // backward) since the bridge was made: the communication the hooks did not
  // hide behind the host's compute, as the host sees it (a step benchmark
  // subtracts it from its forward+backward time).
  double hookSeconds() const { return hookSeconds_; }

private:
  struct Param;
  enum class Phase { Idle, InForward, Forwarded, InBackward, Done };
  void refreshGroup(int g);
  void onPreBackward(int g);
  void onGradAccumulated(int g);
  int groupOfModule(const std::string &path, const char *call) const;

  dmuon::Runtime &rt_;
  std::vector<Param> params_;
  std::vector<std::string> groupNames_;
  std::set<std::string> modulePaths_;
  std::vector<std::vector<size_t>> groupParams_;
  std::vector<Phase> phase_;
  std::vector<size_t> pendingGrads_;
  double hookSeconds_ = 0;
};

} // namespace dmuon_torch

#endif
