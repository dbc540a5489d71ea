#include "optim/OwnerStep.h"

#include "kernels/NsForms.h"

namespace dmuon::rt {

Status OwnerStep::init(const Context &ctx, std::vector<ParamRt> &params) {
  ctx_ = &ctx;
  params_ = &params;
  int64_t big = 0, bigBatch = 1, bigRows = 0, bigCols = 0;
  for (const ParamRt &p : params) {
    if (!p.isOwner || !p.muon)
      continue;
    const int64_t rows = p.comm ? p.plan->rows() : p.localRows;
    const int64_t cols = p.comm ? p.plan->cols() : p.localCols;
    if (p.localBatch * rows * cols > big) {
      big = p.localBatch * rows * cols;
      bigBatch = p.localBatch;
      bigRows = rows;
      bigCols = cols;
    }
  }
  return big > 0 ? ctx.device.reserve(bigBatch, bigRows, bigCols) : Status::ok();
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
                                                  p.reducedGrad.floats(), p.localBatch,
                                                  p.localRows, p.localCols, h));
    if (!p.comm || p.gatherCoord == p.computeIndex) // at the runtime's ns_steps
      nsFlops_ += static_cast<double>(p.localBatch) *
                  kernels::ns::flops(p.nsForm, p.comm ? p.plan->rows() : p.localRows,
                                     p.comm ? p.plan->cols() : p.localCols, cfg.muon.nsSteps);
    p.reducedGrad.release();
  }
  return Status::ok();
}

} // namespace dmuon::rt
