#include "routes/ReplicatedRoute.h"

namespace dmuon::rt {

Status ReplicatedRoute::init(const Context &ctx, std::vector<ParamRt> &params) {
  ctx_ = &ctx;
  params_ = &params;
  for (size_t i = 0; i < params.size(); ++i) {
    ParamRt &p = params[i];
    if (p.route != Route::Replicated)
      continue;
    p.gradOffset = elements_;
    elements_ += static_cast<size_t>(p.numel);
    members_.push_back(static_cast<int>(i));
  }
  return grad_.allocate(ctx.device, elements_ * sizeof(float));
}

Status ReplicatedRoute::reduce() {
  const Topology &t = ctx_->topo;
  if (!ctx_->config.manageAdamW || members_.empty() || t.G * t.R == 1)
    return Status::ok();
  RequestId id;
  DMUON_RETURN_IF_ERROR(
      ctx_->backend.allReduceSum(CommGroup::DataParallel, grad_.floats(), elements_, id));
  DMUON_RETURN_IF_ERROR(ctx_->backend.wait(id));
  ctx_->counters.count(DMUON_COLLECTIVE_ALLREDUCE, gradBytes(), gradBytes());
  return ctx_->device.scaleCopy(grad_.floats(), grad_.floats(),
                                1.0f / static_cast<float>(t.G * t.R),
                                static_cast<int64_t>(elements_));
}

Status ReplicatedRoute::step() {
  Device &dev = ctx_->device;
  // The documented contract when the host opts out: gradients start each
  // step at zero.
  if (!ctx_->config.manageAdamW || members_.empty())
    return zeroGrads();
  ++adamwStep_;
  for (int i : members_) {
    ParamRt &p = (*params_)[i];
    AdamWHyper h = ctx_->config.adamw;
    h.lr *= p.lrScale;
    h.weightDecay *= p.weightDecayScale;
    DMUON_RETURN_IF_ERROR(dev.adamwStep(p.master.floats(), p.adamM.floats(), p.adamV.floats(),
                                        grad_.floats() + p.gradOffset, p.numel, adamwStep_, h));
  }
  return zeroGrads();
}

} // namespace dmuon::rt
