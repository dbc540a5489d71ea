#include "optim/GatheredMuon.h"

#include "optim/MatrixBlocks.h"

namespace dmuon::rt {

Status gatheredMuonStep(const Context &ctx, ParamRt &p, const float *grad, const MuonHyper &h,
                        GatherScratch &sc, DeviceArray &blockScratch) {
  const MatrixGather &g = p.gather;
  Device &dev = ctx.device;
  Backend &backend = ctx.backend;
  const size_t local = static_cast<size_t>(p.numel), bytes = local * sizeof(float);
  const int K = g.size;
  const bool computes = g.coord == g.computeIndex;
  auto ensure = [&](DeviceArray &a, size_t need) -> Status {
    return a.size() >= need ? Status::ok() : a.allocate(dev, need);
  };
  DMUON_RETURN_IF_ERROR(ensure(sc.u, bytes));
  DMUON_RETURN_IF_ERROR(ensure(sc.ortho, bytes));
  DMUON_RETURN_IF_ERROR(
      dev.muonMomentum(p.state[0].floats(), grad, sc.u.floats(), p.numel, h));
  if (computes) {
    DMUON_RETURN_IF_ERROR(ensure(sc.chunks, bytes * K));
    DMUON_RETURN_IF_ERROR(ensure(sc.full, bytes * K));
  }
  RequestId id;
  DMUON_RETURN_IF_ERROR(
      backend.gather(g.group, sc.u.floats(), sc.chunks.floats(), local, g.computeIndex, id));
  DMUON_RETURN_IF_ERROR(backend.wait(id));
  // Chunk k is the local tensor of coordinate k, padded to the largest
  // (Params.h): its own [outer, chunks[k], inner] come first. The
  // whole tensor is their concatenation along the gathered tensor dim.
  const size_t unit = static_cast<size_t>(g.concatInner) * sizeof(float);
  size_t fullRow = 0;
  for (int64_t n : g.chunks)
    fullRow += static_cast<size_t>(n) * unit;
  const size_t height = static_cast<size_t>(g.concatOuter);
  if (computes) {
    size_t at = 0;
    for (int k = 0; k < K; ++k) {
      const size_t row = static_cast<size_t>(g.chunks[k]) * unit;
      DMUON_RETURN_IF_ERROR(dev.copy2D(sc.full.bytes() + at, fullRow,
                                       sc.chunks.bytes() + k * bytes, row, row, height));
      at += row;
    }
    DMUON_RETURN_IF_ERROR(orthogonalizeBlocks(dev, sc.full.floats(), p.sliceBatch, p.plan->rows(),
                                              p.plan->cols(), p.blocks, h, blockScratch));
    DMUON_RETURN_IF_ERROR(scaleBlocks(dev, sc.full.floats(), p.sliceBatch, p.plan->rows(),
                                      p.plan->cols(), p.blocks, h));
    at = 0;
    for (int k = 0; k < K; ++k) {
      const size_t row = static_cast<size_t>(g.chunks[k]) * unit;
      DMUON_RETURN_IF_ERROR(dev.copy2D(sc.chunks.bytes() + k * bytes, row,
                                       sc.full.bytes() + at, fullRow, row, height));
      at += row;
    }
  }
  ctx.counters.countFanIn(DMUON_COLLECTIVE_GATHER, computes, K - 1, bytes);
  ctx.counters.countFanOut(DMUON_COLLECTIVE_SCATTER, computes, K - 1, bytes);
  DMUON_RETURN_IF_ERROR(backend.scatter(g.group, sc.chunks.floats(), sc.ortho.floats(),
                                        local, g.computeIndex, id));
  DMUON_RETURN_IF_ERROR(backend.wait(id));
  return dev.muonApply(p.master.floats(), sc.ortho.floats(), p.numel, p.plan->rows(),
                       p.plan->cols(), h);
}

} // namespace dmuon::rt
