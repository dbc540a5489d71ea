// The dmuon variants: the model's params live in the runtime's buffers
// (examples/gpt's ParamBridge), the hooks run from the model's forward and
// from autograd, and the bridge measures the time spent inside them.
#include "StepVariant.h"

#include "BridgeHooks.h"
#include "dmuon/torch/DmuonTorch.h"

namespace step_bench {
namespace {

using gpt::BridgeHooks;

dmuon_runtime_options_t runtimeOptions(MPI_Comm *comm, dmuon_mode_t mode,
                                       const OptimizerSettings &s) {
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.backend = DMUON_BACKEND_MPI;
  o.communicator = comm;
  o.mode = mode;
  // Every hyper-parameter explicit: the baselines step with the same.
  o.lr = s.muon.lr;
  o.momentum = s.muon.momentum;
  o.weight_decay = s.muon.weightDecay;
  o.nesterov = s.muon.nesterov ? 1 : 0;
  o.ns_steps = s.muon.nsSteps;
  o.adamw_lr = s.adamw.lr;
  o.adamw_beta1 = s.adamw.beta1;
  o.adamw_beta2 = s.adamw.beta2;
  o.adamw_eps = s.adamw.eps;
  o.adamw_weight_decay = s.adamw.weightDecay;
  return o;
}

class DmuonVariant : public StepVariant {
public:
  DmuonVariant(std::unique_ptr<BenchModel> model, const dmuon::Plan &plan, MPI_Comm comm,
               dmuon_mode_t mode, const OptimizerSettings &s)
      : comm_(comm), model_(std::move(model)), rt_(plan, runtimeOptions(&comm_, mode, s)),
        bridge_(rt_, plan, model_->module()), hooks_(bridge_) {}

  StepTimes runStep(const torch::Tensor &window, double &loss) override {
    const double hooksBefore = bridge_.hookSeconds();
    const auto start = std::chrono::steady_clock::now();
    bridge_.beginStep();
    torch::Tensor l = model_->loss(window, &hooks_);
    l.backward();
    bridge_.endBackward();
    const double forwardBackward = secondsSince(start);
    const auto stepStart = std::chrono::steady_clock::now();
    rt_.step();
    StepTimes t;
    t.step = secondsSince(stepStart);
    t.comm = bridge_.hookSeconds() - hooksBefore;
    t.fwdBwd = forwardBackward - t.comm;
    loss = l.item<double>();
    return t;
  }

private:
  MPI_Comm comm_; // the runtime reads it through a pointer while it is created
  std::unique_ptr<BenchModel> model_;
  dmuon::Runtime rt_;
  dmuon_torch::ParamBridge bridge_; // destroyed before the runtime
  BridgeHooks hooks_;
};

} // namespace

std::unique_ptr<StepVariant> makeDmuonVariant(std::unique_ptr<BenchModel> model,
                                              const dmuon::Plan &plan, MPI_Comm comm,
                                              dmuon_mode_t mode, const OptimizerSettings &s) {
  return std::make_unique<DmuonVariant>(std::move(model), plan, comm, mode, s);
}

} // namespace step_bench
