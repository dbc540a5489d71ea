#include "optim/OwnerStep.h"

#include "kernels/NsForms.h"

namespace dmuon::rt {

Status OwnerStep::init(const Context &ctx, std::vector<ParamRt> &params) {
  ctx_ = &ctx;
  params_ = &params;
  // Every owned Muon shape: gatheredMuonStep runs NS on the full matrix,
  // muonStep on the local one.
  std::vector<MatrixShape> shapes;
  for (const ParamRt &p : params) {
    if (!p.isOwner || !p.muon)
      continue;
    shapes.push_back({p.localBatch, p.comm ? p.plan->rows() : p.localRows,
                      p.comm ? p.plan->cols() : p.localCols});
  }
  return shapes.empty() ? Status::ok() : ctx.device.reserve(shapes);
}

Status OwnerStep::step(int64_t adamwStep) {
  const Config &cfg = ctx_->config;
  for (ParamRt &p : *params_) {
    if (!p.isOwner)
      continue;
    if (!p.muon) {
      DMUON_RETURN_IF_ERROR(adamwUpdate(ctx_->device, p, cfg.adamw, p.reducedGrad.floats(),
                                        p.numel, adamwStep));
      p.reducedGrad.release();
      continue;
    }
    MuonHyper h = withGroupScale(cfg.muon, p);
    h.nsForm = p.nsForm;
    if (p.comm)
      DMUON_RETURN_IF_ERROR(gatheredMuonStep(*ctx_, p, h, scratch_));
    else
      DMUON_RETURN_IF_ERROR(ctx_->device.muonStep(p.master.floats(), p.momentum.floats(),
                                                  p.reducedGrad.floats(), p.sliceBatch,
                                                  p.localRows, p.localCols, h));
    if (!p.comm || p.gatherCoord == p.computeIndex) // at the runtime's ns_steps
      nsFlops_ += static_cast<double>(p.sliceBatch) *
                  kernels::ns::flops(p.nsForm, p.comm ? p.plan->rows() : p.localRows,
                                     p.comm ? p.plan->cols() : p.localCols, cfg.muon.nsSteps);
    p.reducedGrad.release();
  }
  return Status::ok();
}

} // namespace dmuon::rt
