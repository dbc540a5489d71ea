#include "core/ParamSlice.h"

#include "common/MeshIndex.h"
#include "common/PlanAccess.h"
#include "common/ShardChunks.h"

#include <string>
#include <vector>

namespace dmuon::rt {

Status paramSlice(const plan::Plan &plan, int index, int rank, dmuon_param_slice_t &out) {
  const plan::Param &p = *plan.params()->Get(static_cast<flatbuffers::uoffset_t>(index));
  const plan::Mesh &mesh = *plan.mesh();
  const int ndim = static_cast<int>(p.shape()->size());
  if (ndim > DMUON_MAX_DIMS)
    return unsupported("param '" + p.name()->str() + "' has more than " +
                       std::to_string(DMUON_MAX_DIMS) + " dims");
  // A StridedShard slice is several runs of a dim, which one offset per
  // dim cannot describe: the host binds the DTensor's local tensor as it is
  // (to_local(); the runtime checkpoints it box by box itself).
  const auto *pls = p.placements();
  for (flatbuffers::uoffset_t d = 0; pls && d < pls->size(); ++d) {
    const plan::Placement *pl = pls->Get(d);
    if (pl->kind() != plan::PlacementKind::strided_shard)
      continue;
    const std::string dim = d < mesh.dims()->size() ? common::str(mesh.dims()->Get(d)->name())
                                                    : std::to_string(d);
    return unsupported("dmuon_plan_param_slice: param '" + p.name()->str() + "' is StridedShard(" +
                       std::to_string(pl->dim()) + ", " + std::to_string(pl->split_factor()) +
                       ") on mesh dim '" + dim + "': a rank's slice of dim " +
                       std::to_string(pl->dim()) +
                       " is interleaved runs (DTensor's _StridedShard), not one box (shape and "
                       "offset) that dmuon_param_slice_t can describe; bind the DTensor's local "
                       "tensor (to_local()) as it is");
  }
  std::vector<int64_t> sizes;
  for (const plan::MeshDim *d : *mesh.dims())
    sizes.push_back(d->size());
  const std::vector<int64_t> full(p.shape()->begin(), p.shape()->end());
  const common::LocalSlice s = common::localSliceOf(full, common::shardLayoutOf(p, mesh),
                                                    common::rowMajorCoord(sizes, rank));
  out.ndim = ndim;
  out.numel = s.numel();
  for (int k = 0; k < ndim; ++k) {
    out.shape[k] = s.shape[k];
    out.offset[k] = s.offset[k];
  }
  return Status::ok();
}

} // namespace dmuon::rt
