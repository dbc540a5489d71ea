#include "GptBackends.h"
#include "BridgeHooks.h"

#include "ReferenceMuon.h"
#include "dmuon/torch/DmuonTorch.h"

#include <stdexcept>

namespace gpt {
namespace {

// --------------------------------------------------------------- dmuon

dmuon_runtime_options_t runtimeOptions(const GptFlags &f, MPI_Comm *comm) {
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.backend = DMUON_BACKEND_MPI;
  o.communicator = comm;
  o.mode = f.mode;
  // Every hyper-parameter explicit, so that the reference uses the same.
  o.lr = f.lr;
  o.momentum = f.momentum;
  o.weight_decay = f.weightDecay;
  o.nesterov = 1;
  o.ns_steps = 5;
  o.adamw_lr = f.adamwLr;
  o.adamw_beta1 = 0.9;
  o.adamw_beta2 = 0.999;
  o.adamw_eps = 1e-8;
  o.adamw_weight_decay = f.adamwWeightDecay;
  return o;
}

class DmuonBackend : public TrainBackend {
public:
  DmuonBackend(const GptFlags &f, Gpt model, const dmuon::Plan &plan, MPI_Comm comm)
      : comm_(comm), model_(std::move(model)), rt_(plan, runtimeOptions(f, &comm_)),
        bridge_(rt_, plan, *model_), hooks_(bridge_), replica_(model_->config()),
        current_{f.lr, f.adamwLr, 1}, planRates_(rt_.hyperParams()) {}

  void beginStep(const StepSettings &s) override {
    // Every rank passes the same settings: the call is collective.
    if (s.lr != current_.lr || s.adamwLr != current_.adamwLr || s.scale != current_.scale) {
      dmuon_hyper_params_t h;
      dmuon_hyper_params_init(&h);
      h.lr = s.lr;
      h.adamw_lr = s.adamwLr;
      // SOAP and Shampoo warm up as Muon and AdamW do, from the plan's rates.
      h.soap_lr = planRates_.soap_lr * s.scale;
      h.shampoo_lr = planRates_.shampoo_lr * s.scale;
      rt_.setHyperParams(h);
      current_ = s;
    }
    bridge_.beginStep();
  }
  BlockHooks *hooks() override { return &hooks_; }
  void endBackward() override { bridge_.endBackward(); }
  void step() override { rt_.step(); }
  Gpt evalModel() override {
    bridge_.gatherInto(*replica_);
    return replica_;
  }

private:
  MPI_Comm comm_; // the runtime keeps a pointer to it until creation returns
  Gpt model_;
  dmuon::Runtime rt_;
  dmuon_torch::ParamBridge bridge_;
  BridgeHooks hooks_;
  Gpt replica_;
  StepSettings current_;            // what the runtime steps with
  dmuon_hyper_params_t planRates_; // before any schedule: the plan's (SOAP's, Shampoo's lr)
};

// ----------------------------------------------------------- reference

class ReferenceBackend : public TrainBackend {
public:
  ReferenceBackend(const GptFlags &f, Gpt model, const dmuon::Plan &plan)
      : model_(std::move(model)) {
    std::vector<torch::Tensor> muon, adamw;
    for (auto &np : model_->named_parameters()) {
      const dmuon_param_info_t info = plan.param(plan.findParam(np.key()));
      (info.role == DMUON_ROLE_MUON ? muon : adamw).push_back(np.value());
    }
    MuonOptions mo;
    mo.lr = f.lr;
    mo.momentum = f.momentum;
    mo.weightDecay = f.weightDecay;
    muon_ = std::make_unique<ReferenceMuon>(muon, mo);
    adamw_ = std::make_unique<torch::optim::AdamW>(
        adamw, torch::optim::AdamWOptions(f.adamwLr)
                   .betas({0.9, 0.999})
                   .eps(1e-8)
                   .weight_decay(f.adamwWeightDecay));
  }

  void beginStep(const StepSettings &s) override {
    muonLr_ = s.lr;
    for (auto &group : adamw_->param_groups())
      static_cast<torch::optim::AdamWOptions &>(group.options()).lr(s.adamwLr);
  }
  BlockHooks *hooks() override { return nullptr; }
  void endBackward() override {}
  void step() override {
    muon_->setLr(muonLr_);
    muon_->step();
    adamw_->step();
    muon_->zeroGrad();
    adamw_->zero_grad();
  }
  Gpt evalModel() override { return model_; }

private:
  Gpt model_;
  std::unique_ptr<ReferenceMuon> muon_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
  double muonLr_ = 0;
};

} // namespace

std::unique_ptr<TrainBackend> makeDmuonBackend(const GptFlags &flags, Gpt model,
                                               const dmuon::Plan &plan, MPI_Comm comm) {
  return std::make_unique<DmuonBackend>(flags, std::move(model), plan, comm);
}

std::unique_ptr<TrainBackend> makeReferenceBackend(const GptFlags &flags, Gpt model,
                                                   const dmuon::Plan &plan) {
  return std::make_unique<ReferenceBackend>(flags, std::move(model), plan);
}

} // namespace gpt
