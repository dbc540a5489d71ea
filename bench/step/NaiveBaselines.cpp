// The two naive ways to run Muon under data parallelism that dmuon is
// measured against. They are baselines, written here for the benchmark
// only: the same model, the same CPU kernels (kernels/cpu) as dmuon's owner
// step, plain blocking MPI collectives on the world communicator.
//
// Both keep every param replicated for forward and backward (as DDP and
// ZeRO-1 do) and treat the non-Muon params as dmuon does: all-reduce of
// their gradients and AdamW on every rank, inside the optimizer step.
#include "FlatParams.h"
#include "StepVariant.h"

#include "kernels/cpu/MuonKernels.h"

#include <algorithm>
#include <stdexcept>

namespace step_bench {
namespace {

namespace kernels = dmuon::kernels;

void check(int mpiStatus, const char *what) {
  if (mpiStatus != MPI_SUCCESS)
    throw std::runtime_error(std::string("MPI error in ") + what);
}

void scale(float *x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i)
    x[i] *= factor;
}

std::vector<torch::Tensor> paramsWithRole(torch::nn::Module &model, const dmuon::Plan &plan,
                                          dmuon_role_t role) {
  std::vector<torch::Tensor> out;
  for (auto &np : model.named_parameters())
    if (plan.param(plan.findParam(np.key())).role == role)
      out.push_back(np.value());
  return out;
}

// What both baselines share: forward and backward without hooks, the
// AdamW params' all-reduce and update; the Muon matrices are left to the
// subclass (its gradient collective, then its optimizer step).
class NaiveBaseline : public StepVariant {
public:
  NaiveBaseline(std::unique_ptr<BenchModel> model, const dmuon::Plan &plan, MPI_Comm comm,
                const OptimizerSettings &s, int64_t muonPadTo)
      : model_(std::move(model)), comm_(comm), settings_(s),
        muon_(paramsWithRole(model_->module(), plan, DMUON_ROLE_MUON), muonPadTo),
        adamw_(paramsWithRole(model_->module(), plan, DMUON_ROLE_ADAMW), 1),
        adamwM_(size_t(adamw_.size()), 0.0f), adamwV_(size_t(adamw_.size()), 0.0f) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &world_);
  }

  StepTimes runStep(const torch::Tensor &window, double &loss) override {
    StepTimes t;
    auto start = std::chrono::steady_clock::now();
    torch::Tensor l = model_->loss(window, nullptr);
    l.backward();
    t.fwdBwd = secondsSince(start);
    start = std::chrono::steady_clock::now();
    reduceMuonGrads();
    t.comm = secondsSince(start);
    start = std::chrono::steady_clock::now();
    stepMuon();
    stepAdamW();
    muon_.zeroGrads();
    adamw_.zeroGrads();
    t.step = secondsSince(start);
    loss = l.item<double>();
    return t;
  }

protected:
  // The Muon gradients' collective, where DDP or ZeRO would run it from
  // backward hooks (here after backward, blocking: nothing hides it).
  virtual void reduceMuonGrads() = 0;
  // Momentum, NS and update of every Muon matrix, with their collectives.
  virtual void stepMuon() = 0;

  std::unique_ptr<BenchModel> model_;
  MPI_Comm comm_;
  int rank_ = 0, world_ = 1;
  OptimizerSettings settings_;
  FlatParams muon_;
  kernels::NsWorkspace ws_;

private:
  void stepAdamW() {
    const int64_t n = adamw_.size();
    check(MPI_Allreduce(MPI_IN_PLACE, adamw_.grads(), int(n), MPI_FLOAT, MPI_SUM, comm_),
          "all-reduce of the AdamW gradients");
    scale(adamw_.grads(), n, 1.0f / float(world_));
    kernels::adamwStep(adamw_.values(), adamwM_.data(), adamwV_.data(), adamw_.grads(), n,
                       ++adamwSteps_, settings_.adamw);
  }

  FlatParams adamw_;
  std::vector<float> adamwM_, adamwV_;
  int64_t adamwSteps_ = 0;
};

// Baseline 1: all-reduce every gradient; every rank runs the whole Muon
// step (NS included) on every matrix, redundantly.
class AllReduceBaseline : public NaiveBaseline {
public:
  AllReduceBaseline(std::unique_ptr<BenchModel> model, const dmuon::Plan &plan, MPI_Comm comm,
                    const OptimizerSettings &s)
      : NaiveBaseline(std::move(model), plan, comm, s, 1),
        momentum_(size_t(muon_.size()), 0.0f) {}

private:
  void reduceMuonGrads() override {
    check(MPI_Allreduce(MPI_IN_PLACE, muon_.grads(), int(muon_.size()), MPI_FLOAT, MPI_SUM,
                        comm_),
          "all-reduce of the Muon gradients");
  }
  void stepMuon() override {
    scale(muon_.grads(), muon_.size(), 1.0f / float(world_));
    for (const FlatParams::Entry &e : muon_.entries())
      kernels::muonStep(muon_.values() + e.offset, momentum_.data() + e.offset,
                        muon_.grads() + e.offset, 1, e.rows, e.cols, settings_.muon, ws_);
  }

  std::vector<float> momentum_;
};

// Baseline 2, Moonlight's Distributed Muon (Liu et al. 2025, Algorithm 1)
// on ZeRO-1: the flat Muon gradient buffer is split in `world` equal
// shards. Reduce-scatter (backward's collective), momentum on the local
// shard (the optimizer state is sharded), all-gather of the momentum-mixed
// gradient so every rank holds every full matrix, NS on every matrix on
// every rank, update of the local shard of the params, all-gather of the
// params.
class Zero1GatherBaseline : public NaiveBaseline {
public:
  Zero1GatherBaseline(std::unique_ptr<BenchModel> model, const dmuon::Plan &plan, MPI_Comm comm,
                      const OptimizerSettings &s, int world)
      : NaiveBaseline(std::move(model), plan, comm, s, world), shard_(muon_.size() / world_),
        gradShard_(size_t(shard_), 0.0f), momentumShard_(size_t(shard_), 0.0f),
        update_(size_t(muon_.size()), 0.0f) {}

private:
  void reduceMuonGrads() override {
    check(MPI_Reduce_scatter_block(muon_.grads(), gradShard_.data(), int(shard_), MPI_FLOAT,
                                   MPI_SUM, comm_),
          "reduce-scatter of the Muon gradients");
  }
  void stepMuon() override {
    const int64_t begin = rank_ * shard_, end = begin + shard_;
    scale(gradShard_.data(), shard_, 1.0f / float(world_));
    // The NS input of the local shard, written where the all-gather wants it.
    kernels::muonMomentum(momentumShard_.data(), gradShard_.data(), update_.data() + begin, shard_,
                          settings_.muon);
    check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, update_.data(), int(shard_),
                        MPI_FLOAT, comm_),
          "all-gather of the Muon updates");
    const kernels::MuonHyper &h = settings_.muon;
    for (const FlatParams::Entry &e : muon_.entries()) {
      float *u = update_.data() + e.offset;
      kernels::newtonSchulz(u, u, e.rows, e.cols, h.nsSteps, h.coefficients, ws_);
      // Only the part of this matrix in the local shard is updated here.
      const int64_t from = std::max(begin, e.offset), to = std::min(end, e.offset + e.numel);
      if (from < to)
        kernels::muonApply(muon_.values() + from, update_.data() + from, to - from, e.rows,
                           e.cols, h);
    }
    check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, muon_.values(), int(shard_),
                        MPI_FLOAT, comm_),
          "all-gather of the Muon params");
  }

  int64_t shard_;
  std::vector<float> gradShard_, momentumShard_, update_;
};

} // namespace

std::unique_ptr<StepVariant> makeAllReduceBaseline(std::unique_ptr<BenchModel> model,
                                                   const dmuon::Plan &plan, MPI_Comm comm,
                                                   const OptimizerSettings &s) {
  return std::make_unique<AllReduceBaseline>(std::move(model), plan, comm, s);
}

std::unique_ptr<StepVariant> makeZero1GatherBaseline(std::unique_ptr<BenchModel> model,
                                                     const dmuon::Plan &plan, MPI_Comm comm,
                                                     const OptimizerSettings &s) {
  int world = 1;
  MPI_Comm_size(comm, &world);
  return std::make_unique<Zero1GatherBaseline>(std::move(model), plan, comm, s, world);
}

} // namespace step_bench
