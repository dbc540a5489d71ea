#include "plan/PlanView.h"

#include "common/MeshIndex.h"
#include "plan/Features.h"

namespace dmuon {

PlanView::PlanView(const plan::Plan &p) {
  const plan::Mesh *m = p.mesh();
  if (!m)
    return;
  for (uint32_t i = 0; m->dims() && i < m->dims()->size(); ++i) {
    const plan::MeshDim *d = m->dims()->Get(i);
    dims.push_back(d->size());
    dimNames.push_back(d->name() ? d->name()->str() : std::string());
    carriesData.push_back(d->carries_data());
  }
  shardDim = m->shard_dim();
  replicateDim = m->replicate_dim();
  G = m->num_shards() > 0 ? m->num_shards() : 1;
  R = m->num_replicas() > 0 ? m->num_replicas() : 1;
  if (planHas(p, PlanFeature::PipelineStages) && m->stage_dim() >= 0 &&
      static_cast<size_t>(m->stage_dim()) < dims.size()) {
    stageDim = m->stage_dim();
    P = dims[static_cast<size_t>(stageDim)] > 0 ? dims[static_cast<size_t>(stageDim)] : 1;
  }
  if (planHas(p, PlanFeature::DataCarryingDims))
    for (size_t i = 0; i < dims.size(); ++i)
      if (carriesData[i] && dims[i] > 0)
        D *= dims[i];
}

int64_t PlanView::slotRank(int64_t s, int64_t r) const {
  return common::slotRank(dims, shardDim, replicateDim, s, r);
}

int64_t PlanView::ownerRank(int64_t s, int64_t r, int64_t d) const {
  return common::ownerRank(
      dims, shardDim, replicateDim, [&](int i) { return D > 1 && carriesData[i]; }, s, r, d);
}

int64_t PlanView::stageOwnerRank(int64_t s, int64_t r, int64_t d, int64_t stage) const {
  return common::stageOwnerRank(
      dims, shardDim, replicateDim, stageDim, stage, [&](int i) { return D > 1 && carriesData[i]; },
      s, r, d);
}

int64_t PlanView::stageOfRank(int64_t rank) const {
  return stageDim < 0 ? 0 : coord(rank)[static_cast<size_t>(stageDim)];
}

std::vector<int64_t> PlanView::coord(int64_t rank) const {
  return common::rowMajorCoord(dims, rank);
}

int64_t PlanView::ranks() const {
  int64_t n = 1;
  for (int64_t s : dims)
    n *= s;
  return n;
}

} // namespace dmuon
