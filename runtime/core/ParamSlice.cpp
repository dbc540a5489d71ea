#include "core/ParamSlice.h"

#include "common/MeshIndex.h"

#include <string>
#include <vector>

namespace dmuon::rt {

namespace fbp = dmuon::plan;

Status paramSlice(const fbp::Plan &plan, int index, int rank, dmuon_param_slice_t &out) {
  const fbp::Param &p = *plan.params()->Get(static_cast<flatbuffers::uoffset_t>(index));
  const fbp::Mesh &mesh = *plan.mesh();
  const int ndim = static_cast<int>(p.shape()->size());
  if (ndim > DMUON_MAX_DIMS)
    return unsupported("param '" + p.name()->str() + "' has more than " +
                       std::to_string(DMUON_MAX_DIMS) + " dims");
  std::vector<int64_t> sizes;
  for (const fbp::MeshDim *d : *mesh.dims())
    sizes.push_back(d->size());
  const std::vector<int64_t> coord = common::rowMajorCoord(sizes, rank);
  out.ndim = ndim;
  out.numel = 1;
  for (int k = 0; k < ndim; ++k) {
    // The mesh dims sharding tensor dim k, in mesh order: row-major chunks.
    int64_t chunks = 1, chunk = 0;
    const auto *pls = p.placements();
    for (flatbuffers::uoffset_t d = 0; pls && d < pls->size() && d < sizes.size(); ++d) {
      const fbp::Placement &pl = *pls->Get(d);
      if (pl.kind() == fbp::PlacementKind::strided_shard && pl.dim() == k)
        return unsupported("param '" + p.name()->str() +
                           "' is StridedShard; its slices are not contiguous chunks");
      if (pl.kind() != fbp::PlacementKind::shard || pl.dim() != k)
        continue;
      chunks *= sizes[d];
      chunk = chunk * sizes[d] + coord[d];
    }
    const int64_t full = p.shape()->Get(static_cast<flatbuffers::uoffset_t>(k));
    out.shape[k] = full / chunks;
    out.offset[k] = chunk * out.shape[k];
    out.numel *= out.shape[k];
  }
  return Status::ok();
}

} // namespace dmuon::rt
