#include "optim/Muon.h"

#include "common/MatrixBlocks.h"
#include "kernels/NsForms.h"
#include "optim/MatrixBlocks.h"

namespace dmuon::rt {

namespace {

constexpr StateField kMuonFields[] = {
    {ckpt::Kind::Momentum, &MemoryAccounts::momentum},
};
// The plan counts NorMuon's second moment with the momentum
// (common/MatrixOptimizers.h).
constexpr StateField kNorMuonFields[] = {
    {ckpt::Kind::Momentum, &MemoryAccounts::momentum},
    {ckpt::Kind::NorMuonV, &MemoryAccounts::momentum, StateShape::Rows},
};

MuonHyper hyperOf(const Context &ctx, const ParamRt &p) {
  MuonHyper h = withGroupScale(ctx.config.muon, p);
  h.nsForm = p.nsForm;
  return h;
}

} // namespace

MatrixShape MatrixRule::nsShape(const ParamRt &p) {
  return {p.localBatch, p.gather.active ? p.plan->rows() : p.localRows,
          p.gather.active ? p.plan->cols() : p.localCols};
}

Status MatrixRule::reserve(const Context &ctx, const std::vector<ParamRt> &params) {
  std::vector<MatrixShape> shapes;
  int64_t largestBlocked = 0;
  for (const ParamRt &p : params)
    if (p.optimizer == this && p.route == plan::Route::owner && p.owner.isOwner) {
      const MatrixShape m = nsShape(p);
      for (const MatrixShape &s : blockNsShapes(p.blocks, m.batch, m.rows, m.cols))
        shapes.push_back(s);
      if (!p.blocks.whole())
        largestBlocked = std::max(largestBlocked, m.batch * m.rows * m.cols);
    }
  // Blocks gathered into one batch (optim/MatrixBlocks.h) fit in a matrix.
  if (largestBlocked)
    DMUON_RETURN_IF_ERROR(
        blockScratch_.allocate(ctx.device, static_cast<size_t>(largestBlocked) * sizeof(float)));
  return shapes.empty() ? Status::ok() : ctx.device.reserve(shapes);
}

void MatrixRule::countNs(const Context &ctx, const ParamRt &p) {
  if (p.gather.active && p.gather.coord != p.gather.computeIndex)
    return; // another rank of the gather group ran it
  const MatrixShape m = nsShape(p);
  nsFlops_ += static_cast<double>(p.sliceBatch) *
              common::blockedNsFlops(p.nsForm, p.blocks.dim, m.rows, m.cols, p.blocks.sizes,
                                     ctx.config.muon.nsSteps);
}

std::span<const StateField> Muon::fields() const { return kMuonFields; }

// Muon's matrix view is the param's (p.numel elements); its steps are not
// bias-corrected.
Status Muon::step(const Context &ctx, ParamRt &p, const float *grad, int64_t /*n*/,
                  int64_t /*adamwStep*/) {
  const MuonHyper h = hyperOf(ctx, p);
  Device &dev = ctx.device;
  if (p.gather.active) {
    DMUON_RETURN_IF_ERROR(gatheredMuonStep(ctx, p, grad, h, scratch_, blockScratch_));
  } else if (p.blocks.whole()) {
    DMUON_RETURN_IF_ERROR(dev.muonStep(p.master.floats(), p.state[0].floats(), grad, p.sliceBatch,
                                       p.localRows, p.localCols, h));
  } else {
    DeviceArray &u = scratch_.u;
    const size_t bytes = static_cast<size_t>(p.numel) * sizeof(float);
    if (u.size() < bytes)
      DMUON_RETURN_IF_ERROR(u.allocate(dev, bytes));
    DMUON_RETURN_IF_ERROR(dev.muonMomentum(p.state[0].floats(), grad, u.floats(), p.numel, h));
    DMUON_RETURN_IF_ERROR(orthogonalizeBlocks(dev, u.floats(), p.sliceBatch, p.localRows,
                                              p.localCols, p.blocks, h, blockScratch_));
    DMUON_RETURN_IF_ERROR(
        scaleBlocks(dev, u.floats(), p.sliceBatch, p.localRows, p.localCols, p.blocks, h));
    DMUON_RETURN_IF_ERROR(
        dev.muonApply(p.master.floats(), u.floats(), p.numel, p.localRows, p.localCols, h));
  }
  countNs(ctx, p);
  return Status::ok();
}

std::span<const StateField> NorMuon::fields() const { return kNorMuonFields; }

Status NorMuon::reserve(const Context &ctx, const std::vector<ParamRt> &params) {
  DMUON_RETURN_IF_ERROR(MatrixRule::reserve(ctx, params));
  int64_t largest = 0;
  for (const ParamRt &p : params)
    if (p.optimizer == this && p.route == plan::Route::owner && p.owner.isOwner)
      largest = std::max(largest, p.numel);
  return largest ? scratch_.u.allocate(ctx.device, static_cast<size_t>(largest) * sizeof(float))
                 : Status::ok();
}

// On a local matrix only (the runtime refuses NorMuon params gathered over a
// model-parallel group: Params.cpp).
Status NorMuon::step(const Context &ctx, ParamRt &p, const float *grad, int64_t /*n*/,
                     int64_t /*adamwStep*/) {
  const MuonHyper h = hyperOf(ctx, p);
  Device &dev = ctx.device;
  DeviceArray &u = scratch_.u; // sized by reserve()
  DMUON_RETURN_IF_ERROR(dev.muonMomentum(p.state[0].floats(), grad, u.floats(), p.numel, h));
  DMUON_RETURN_IF_ERROR(orthogonalizeBlocks(dev, u.floats(), p.sliceBatch, p.localRows, p.localCols,
                                            p.blocks, h, blockScratch_));
  DMUON_RETURN_IF_ERROR(dev.normuonNormalize(u.floats(), p.state[1].floats(), p.sliceBatch,
                                             p.localRows, p.localCols, h.normuonBeta2));
  // Per neuron over the whole row, then each block at its own rate.
  DMUON_RETURN_IF_ERROR(
      scaleBlocks(dev, u.floats(), p.sliceBatch, p.localRows, p.localCols, p.blocks, h));
  DMUON_RETURN_IF_ERROR(
      dev.muonApply(p.master.floats(), u.floats(), p.numel, p.localRows, p.localCols, h));
  countNs(ctx, p);
  return Status::ok();
}

} // namespace dmuon::rt
