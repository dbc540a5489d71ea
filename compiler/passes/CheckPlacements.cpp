// check-placements: what the later passes and the runtime can execute of
// the grouped params' placements. dmuon owns the data-parallel placement of
// every param it moves, and the runtime gathers a comm param's matrix over
// exactly one model-parallel mesh dim; anything else is refused here, with the
// param's location, before any work is planned for it.
#include "Passes.h"

namespace dmuon {

namespace {

std::string placementsStr(const Param &p) {
  std::string s = "[";
  for (size_t i = 0; i < p.placements.size(); ++i)
    s.append(i ? "," : "").append(p.placements[i].str());
  return s + "]";
}

// What the runtime supports of a Muon param's model-parallel placements:
// no Partial, and a comm param's matrix dims sharded by exactly one mesh dim
// with a plain Shard (the one it gathers over for NS; see runGroup).
bool checkModelParallel(const Param &p, const Mesh &mesh, Diagnostics &diags) {
  const std::string who = "Muon param '" + p.name + "' with placements " + placementsStr(p);
  for (size_t d = 0; d < p.placements.size(); ++d)
    if (p.placements[d].kind == PlacementKind::partial) {
      diags.error(p.loc, who + " is " + p.placements[d].str() + " on mesh dim '" +
                             mesh.dims[d].name +
                             "': Partial placement on a Muon param is not supported: "
                             "reduce it before the optimizer");
      return false;
    }
  if (p.group != ShardingGroupKind::comm || p.gatherMeshDim >= 0)
    return true;
  std::string dims, strided;
  int count = 0;
  for (size_t d = 0; d < p.placements.size(); ++d) {
    const Placement &pl = p.placements[d];
    if (!shardsMatrixDims(p, mesh, static_cast<int>(d)))
      continue;
    ++count;
    dims += (dims.empty() ? "'" : ", '") + mesh.dims[d].name + "'";
    if (pl.kind == PlacementKind::strided_shard && strided.empty())
      strided = pl.str() + " on mesh dim '" + mesh.dims[d].name + "'";
  }
  if (count > 1)
    diags.error(p.loc, who + ": sharding the matrix dims over more than one mesh dim (" +
                           dims + ") is not supported yet");
  else if (!strided.empty())
    diags.error(p.loc, who + ": StridedShard on a matrix dim (" + strided +
                           ") is not supported yet");
  else
    diags.error(p.loc, who + ": its matrix dims are not sharded by a model-parallel "
                           "mesh dim; this is not supported yet");
  return false;
}

} // namespace

bool runCheckPlacements(PlanModel &model, Diagnostics &diags) {
  const Mesh &mesh = model.mesh;
  // dmuon owns the data-parallel placement of every param it moves by owner
  // or shard: it must be Replicate on the ownership dims.
  for (Param &p : model.params) {
    if (p.role != Role::muon && p.route != Route::owner && p.route != Route::sharded)
      continue;
    bool ok = true;
    for (size_t d = 0; d < p.placements.size(); ++d)
      if (mesh.isOwnershipDim(static_cast<int>(d)) && !p.placements[d].isReplicate()) {
        diags.error(p.loc, std::string(p.role == Role::muon ? "Muon" : "AdamW") + " param '" +
                               p.name + "' is " + p.placements[d].str() +
                               " on data-parallel mesh dim '" + mesh.dims[d].name +
                               "'; dmuon owns the data-parallel placement of the params it "
                               "moves, declare it Replicate" +
                               (p.role == Role::muon ? "" : " (or route it \"replicated\" or \"host\")"));
        ok = false;
      }
    if (ok && p.role == Role::muon)
      ok = checkModelParallel(p, mesh, diags);
  }
  return !diags.hasErrors();
}

} // namespace dmuon
