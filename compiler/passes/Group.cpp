// group: the grouping rule of docs/dmuonc.md#grouping, exactly. A Muon param is no_comm iff no Shard/StridedShard
// placement touches its last two dims (for a flattened conv weight: any dim);
// comm params are grouped by their placements key, and each group records
// its replicate mesh dims: its replicate groups (the Cartesian-product rule
// of §2.3) follow from them and the mesh (common/ReplicateGroups.h), so the
// pass costs O(params x mesh dims), whatever the world size.
#include "Passes.h"

#include <map>
#include <set>

namespace dmuon {

bool shardsMatrixDims(const Param &p, const Mesh &mesh, int meshDim) {
  const Placement &pl = p.placements[static_cast<size_t>(meshDim)];
  const int ndim = static_cast<int>(p.shape.size());
  return !mesh.isOwnershipDim(meshDim) && pl.isShard() && (p.conv || pl.dim >= ndim - 2);
}

bool runGroup(PlanModel &model, Diagnostics &) {
  const Mesh &mesh = model.mesh;
  // Every param's data-carrying dims: its gradient is averaged over those it
  // is Replicate on (different tokens there), not over those that shard it.
  for (Param &p : model.params) {
    p.dataDims.clear();
    for (size_t d = 0; d < p.placements.size() && d < mesh.dims.size(); ++d)
      if (mesh.dims[d].carriesData && p.placements[d].isReplicate())
        p.dataDims.push_back(static_cast<int>(d));
  }
  std::map<std::string, int> groupByKey;
  for (size_t i = 0; i < model.params.size(); ++i) {
    Param &p = model.params[i];
    if (p.role != Role::muon)
      continue;
    const int ndim = static_cast<int>(p.shape.size());
    std::set<int> shardDims;
    std::vector<int> replicateMeshDims;
    std::string key;
    for (size_t d = 0; d < p.placements.size(); ++d) {
      const Placement &pl = p.placements[d];
      if (pl.isShard())
        shardDims.insert(pl.dim);
      // A param lives on one pipeline stage: the ranks that hold copies of
      // its shard never span the stage dim.
      if (pl.isReplicate() && static_cast<int>(d) != mesh.stageDim)
        replicateMeshDims.push_back(static_cast<int>(d));
      key.append(d ? "," : "").append(pl.groupKey());
    }
    bool comm = false;
    for (int d : shardDims)
      if (p.conv || d >= ndim - 2)
        comm = true;
    if (!comm) {
      p.group = ShardingGroupKind::no_comm;
      model.noComm.push_back(static_cast<int>(i));
      continue;
    }
    p.group = ShardingGroupKind::comm;
    // The mesh dim gathered for NS: the one model-parallel mesh dim whose
    // Shard touches the matrix dims. Anything else (several such mesh dims,
    // StridedShard) is not supported yet; check-placements reports it.
    int gatherDims = 0, gatherMeshDim = -1;
    bool strided = false;
    for (size_t d = 0; d < p.placements.size(); ++d) {
      if (!shardsMatrixDims(p, mesh, static_cast<int>(d)))
        continue;
      ++gatherDims;
      gatherMeshDim = static_cast<int>(d);
      strided = strided || p.placements[d].kind == PlacementKind::strided_shard;
    }
    if (gatherDims == 1 && !strided) {
      p.gatherMeshDim = gatherMeshDim;
      p.gatherTensorDim = p.placements[gatherMeshDim].dim;
    }
    auto [it, inserted] =
        groupByKey.try_emplace(key, static_cast<int>(model.commGroups.size()));
    if (inserted) {
      CommGroup g;
      g.key = key;
      g.shardDims.assign(shardDims.begin(), shardDims.end());
      g.replicateMeshDims = replicateMeshDims;
      model.commGroups.push_back(std::move(g));
    }
    p.commGroup = it->second;
    model.commGroups[it->second].params.push_back(static_cast<int>(i));
  }
  return true;
}

} // namespace dmuon
