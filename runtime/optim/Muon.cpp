#include "optim/Muon.h"

#include "kernels/NsForms.h"

namespace dmuon::rt {

namespace {

constexpr StateField kFields[] = {
    {ckpt::Kind::Momentum, &MemoryAccounts::momentum},
};

// The matrix NS runs on: the full one when it is gathered, else the local
// one.
MatrixShape nsShape(const ParamRt &p) {
  return {p.localBatch, p.gather.active ? p.plan->rows() : p.localRows,
          p.gather.active ? p.plan->cols() : p.localCols};
}

} // namespace

std::span<const StateField> Muon::fields() const { return kFields; }

Status Muon::reserve(const Context &ctx, const std::vector<ParamRt> &params) {
  std::vector<MatrixShape> shapes;
  for (const ParamRt &p : params)
    if (p.optimizer == this && p.route == plan::Route::owner && p.owner.isOwner)
      shapes.push_back(nsShape(p));
  return shapes.empty() ? Status::ok() : ctx.device.reserve(shapes);
}

// Muon's matrix view is the param's (p.numel elements); its steps are not
// bias-corrected.
Status Muon::step(const Context &ctx, ParamRt &p, const float *grad, int64_t /*n*/,
                  int64_t /*adamwStep*/) {
  MuonHyper h = withGroupScale(ctx.config.muon, p);
  h.nsForm = p.nsForm;
  if (p.gather.active)
    DMUON_RETURN_IF_ERROR(gatheredMuonStep(ctx, p, grad, h, scratch_));
  else
    DMUON_RETURN_IF_ERROR(ctx.device.muonStep(p.master.floats(), p.state[0].floats(), grad,
                                              p.sliceBatch, p.localRows, p.localCols, h));
  if (!p.gather.active || p.gather.coord == p.gather.computeIndex) { // at the runtime's ns_steps
    const MatrixShape m = nsShape(p);
    nsFlops_ += static_cast<double>(p.sliceBatch) *
                kernels::ns::flops(p.nsForm, m.rows, m.cols, ctx.config.muon.nsSteps);
  }
  return Status::ok();
}

} // namespace dmuon::rt
