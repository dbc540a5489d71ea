#include "routes/ReplicatedRoute.h"

#include "optim/Optimizer.h"

#include <algorithm>

namespace dmuon::rt {

Status ReplicatedRoute::init(const Context &ctx, std::vector<ParamRt> &params) {
  ctx_ = &ctx;
  params_ = &params;
  // Members summed along the same data-carrying dims sit next to each other,
  // so each such sum is one collective.
  std::vector<int> order;
  offsets_.assign(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].route == plan::Route::replicated)
      order.push_back(static_cast<int>(i));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return static_cast<int>(params[a].along.group) < static_cast<int>(params[b].along.group);
  });
  for (int i : order) {
    ParamRt &p = params[i];
    offsets_[i] = elements_;
    elements_ += static_cast<size_t>(p.numel);
    members_.push_back(i);
    if (p.along.size <= 1)
      continue;
    if (alongRuns_.empty() || alongRuns_.back().group != p.along.group)
      alongRuns_.push_back({p.along.group, offsets_[i], 0});
    alongRuns_.back().elements += static_cast<size_t>(p.numel);
  }
  return grad_.allocate(ctx.device, elements_ * sizeof(float), &ctx.memory.grads);
}

Status ReplicatedRoute::finishGradients() {
  const Topology &t = ctx_->topo;
  if (!ctx_->config.manageAdamW || members_.empty() || t.dataParallelSize == 1)
    return Status::ok();
  Backend &backend = ctx_->backend;
  RequestId id;
  if (t.G * t.R > 1) {
    DMUON_RETURN_IF_ERROR(
        backend.allReduceSum(Communicator::DataParallel, grad_.floats(), elements_, id));
    DMUON_RETURN_IF_ERROR(backend.wait(id));
    ctx_->counters.count(DMUON_COLLECTIVE_ALLREDUCE, gradBytes(), gradBytes());
  }
  for (const AlongRun &run : alongRuns_) {
    DMUON_RETURN_IF_ERROR(backend.allReduceSum(run.group, grad_.floats() + run.offset,
                                               run.elements, id));
    DMUON_RETURN_IF_ERROR(backend.wait(id));
    const uint64_t bytes = run.elements * sizeof(float);
    ctx_->counters.count(DMUON_COLLECTIVE_ALLREDUCE, bytes, bytes);
  }
  // AVG over every rank whose data met: G*R and the data-carrying dims.
  return ctx_->device.scaleCopy(grad_.floats(), grad_.floats(),
                                1.0f / static_cast<float>(t.dataParallelSize),
                                static_cast<int64_t>(elements_));
}

GradView ReplicatedRoute::averagedGrad(int index) {
  if (!ctx_->config.manageAdamW)
    return {};
  return {gradSlot(index), (*params_)[index].numel};
}

uint64_t ReplicatedRoute::allReduceBytesPerStep() const {
  const Topology &t = ctx_->topo;
  uint64_t bytes = t.G * t.R > 1 ? gradBytes() : 0;
  for (const AlongRun &run : alongRuns_)
    bytes += run.elements * sizeof(float);
  return members_.empty() ? 0 : bytes;
}

Status ReplicatedRoute::step(int64_t adamwStep) {
  // The documented contract when the host opts out: gradients start each
  // step at zero.
  if (!ctx_->config.manageAdamW || members_.empty())
    return zeroGrads();
  for (int i : members_) {
    ParamRt &p = (*params_)[i];
    DMUON_RETURN_IF_ERROR(
        p.optimizer->step(*ctx_, p, grad_.floats() + offsets_[i], p.numel, adamwStep));
  }
  return zeroGrads();
}

} // namespace dmuon::rt
