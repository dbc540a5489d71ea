#include "core/Params.h"

#include "common/MatrixOptimizers.h"
#include "common/Routes.h"
#include "common/ShardChunks.h"
#include "plan/Features.h"

#include <algorithm>

namespace dmuon::rt {

namespace {

// Whether `p` is Replicate on a data-carrying dim of more than one rank.
bool spansData(const plan::Param &p, const plan::Mesh &mesh) {
  const auto *pls = p.placements();
  for (flatbuffers::uoffset_t d = 0; pls && d < pls->size() && d < mesh.dims()->size(); ++d)
    if (mesh.dims()->Get(d)->carries_data() && mesh.dims()->Get(d)->size() > 1 &&
        pls->Get(d)->kind() == plan::PlacementKind::replicate)
      return true;
  return false;
}

} // namespace

Status checkExecutable(const LoadedPlan &plan) {
  const plan::Mesh &mesh = *plan.root().mesh();
  for (int i = 0; i < plan.numParams(); ++i) {
    const plan::Param &p = plan.param(i);
    const bool commMuon =
        p.role() == plan::Role::muon && p.group() == plan::ShardingGroupKind::comm;
    const auto *pls = p.placements();
    for (flatbuffers::uoffset_t d = 0; pls && d < pls->size(); ++d) {
      const plan::Placement &pl = *pls->Get(d);
      if (pl.kind() == plan::PlacementKind::partial)
        return unsupported("param '" + p.name()->str() + "' is Partial on mesh dim '" +
                           mesh.dims()->Get(d)->name()->str() +
                           "'; Partial placements are not supported yet");
      if (commMuon && pl.kind() == plan::PlacementKind::strided_shard)
        return unsupported("Muon param '" + p.name()->str() +
                           "' is StridedShard on a matrix dim; not supported yet");
    }
    if (commMuon && pls) {
      // One gather along one tensor dim reassembles the matrix only when a
      // single mesh dim shards its matrix dims.
      const int ndim = static_cast<int>(p.shape()->size());
      int matrixShards = 0;
      for (const plan::Placement *pl : *pls)
        if ((pl->kind() == plan::PlacementKind::shard ||
             pl->kind() == plan::PlacementKind::strided_shard) &&
            (p.conv() || pl->dim() >= ndim - 2))
          ++matrixShards;
      if (matrixShards > 1)
        return unsupported("Muon param '" + p.name()->str() +
                           "' has its matrix dims sharded by more than one mesh dim; not "
                           "supported yet");
    }
    if (commMuon && p.matrix_optimizer() != plan::MatrixOptimizer::muon)
      return unsupported("param '" + p.name()->str() + "' is a " +
                         plan::EnumNameMatrixOptimizer(p.matrix_optimizer()) +
                         " matrix sharded on a matrix dim; only Muon gathers a matrix over a "
                         "model-parallel group yet");
    const bool modelSharded = p.local_shape() && p.local_shape()->size() &&
                              !std::equal(p.local_shape()->begin(), p.local_shape()->end(),
                                          p.shape()->begin(), p.shape()->end());
    if (common::preconditions(p.matrix_optimizer()) && p.role() == plan::Role::muon && modelSharded)
      return unsupported("param '" + p.name()->str() + "' is a " +
                         plan::EnumNameMatrixOptimizer(p.matrix_optimizer()) +
                         " matrix sharded over a model-parallel mesh dim; SOAP and Shampoo "
                         "run on matrices one owner holds whole yet");
    if (commMuon && (p.gather_mesh_dim() < 0 || p.compute_index() < 0))
      return unsupported("Muon param '" + p.name()->str() +
                         "' is sharded on a matrix dim but the plan names no gather group; "
                         "recompile it with this dmuonc (not supported yet otherwise)");
    if (!planHas(plan.root(), PlanFeature::DataCarryingDims) && spansData(p, mesh))
      return unsupported("param '" + p.name()->str() +
                         "' is Replicate on a data-carrying mesh dim in a plan of format 1." +
                         std::to_string(plan.root().format_minor()) +
                         ", which does not record its data group (data_dims) and whose owners "
                         "do not span those dims; recompile the plan with this dmuonc");
    const plan::Route route = common::effectiveRoute(p);
    if ((route == plan::Route::owner || route == plan::Route::sharded) &&
        p.dtype() != plan::DType::f32 && p.dtype() != plan::DType::bf16)
      return unsupported("param '" + p.name()->str() + "' travels the " +
                         plan::EnumNameRoute(route) + " route with dtype " +
                         plan::EnumNameDType(p.dtype()) + "; packed buffers support f32 and bf16");
  }
  return Status::ok();
}

namespace {

// A param Replicate on a model-parallel dim has the same gradient at every
// coordinate of it; coordinate 0 speaks for them all, except on the dims in
// `ownedAcross` (an owner's data dims: the owner is unique there) and the
// pipeline dim (its coordinates hold different params, not copies).
bool firstModelParallelCopy(const plan::Param &pp, const Topology &topo,
                            const std::vector<int> &ownedAcross = {}) {
  const auto *pls = pp.placements();
  for (size_t d = 0; d < topo.coord.size(); ++d) {
    if (static_cast<int>(d) == topo.shardDim || static_cast<int>(d) == topo.replicateDim ||
        static_cast<int>(d) == topo.stageDim ||
        std::find(ownedAcross.begin(), ownedAcross.end(), static_cast<int>(d)) != ownedAcross.end())
      continue;
    const bool sharded =
        pls && d < pls->size() &&
        (pls->Get(static_cast<flatbuffers::uoffset_t>(d))->kind() == plan::PlacementKind::shard ||
         pls->Get(static_cast<flatbuffers::uoffset_t>(d))->kind() ==
             plan::PlacementKind::strided_shard);
    if (!sharded && topo.coord[d] != 0)
      return false;
  }
  return true;
}

// The owner route: the owner (s, r, data index) of the param's unit, and
// the column its phase-2 reduce and replicate broadcast span (dp_replicate
// and `dataDims`, in mesh order; Communicator::Replicate when that is all).
Status ownerColumn(const plan::Param &pp, const plan::Unit &unit, const std::vector<int> &dataDims,
                   Topology &topo, Backend &backend, ParamRt &p) {
  OwnerPlace &own = p.owner;
  own.so = unit.slot() % topo.G;
  own.ro = unit.slot() / topo.G;
  p.group = pp.hook_group();
  std::vector<int> owner = topo.withDataIndex(unit.data_index());
  if (topo.shardDim >= 0)
    owner[topo.shardDim] = own.so;
  if (topo.replicateDim >= 0)
    owner[topo.replicateDim] = own.ro;
  std::vector<int> dims;
  for (int d = 0; d < static_cast<int>(topo.dimSizes.size()); ++d)
    if ((d == topo.replicateDim ||
         std::find(dataDims.begin(), dataDims.end(), d) != dataDims.end()) &&
        topo.dimSizes[d] > 1)
      dims.push_back(d);
  OwnerColumn &col = own.column;
  col.size = topo.sizeAlong(dims);
  col.root = topo.indexAlong(dims, owner);
  col.mine = topo.indexAlong(dims, topo.coord);
  own.keepsMaster = own.so == topo.s;
  own.isOwner = own.keepsMaster && col.mine == col.root;
  if (dims.size() == 1 && dims[0] == topo.replicateDim)
    col.group = Communicator::Replicate;
  else if (col.size > 1)
    DMUON_RETURN_IF_ERROR(topo.groupAlong(backend, dims, col.group));
  return Status::ok();
}

std::vector<int64_t> coordOf(const Topology &topo) {
  return std::vector<int64_t>(topo.coord.begin(), topo.coord.end());
}

} // namespace

Status buildParams(const LoadedPlan &plan, Topology &topo, Backend &backend,
                   std::vector<ParamRt> &out) {
  const auto *units = plan.root().units();
  out.resize(plan.numParams());
  for (int i = 0; i < plan.numParams(); ++i) {
    const plan::Param &pp = plan.param(i);
    ParamRt &p = out[i];
    p.plan = &pp;
    p.name = pp.name()->str();
    p.muon = pp.role() == plan::Role::muon;
    p.route = common::effectiveRoute(pp);
    // A model-parallel param is held as this rank's local shard, padded to
    // the largest coordinate's.
    const bool local = pp.local_shape() && pp.local_shape()->size();
    const auto *shape = local ? pp.local_shape() : pp.shape();
    p.numel = 1;
    for (int64_t d : *shape)
      p.numel *= d;
    const common::ShardLayout layout = common::shardLayoutOf(pp, *plan.root().mesh());
    const std::vector<int64_t> full(pp.shape()->begin(), pp.shape()->end());
    const common::LocalSlice slice = common::localSliceOf(full, layout, coordOf(topo));
    p.sliceNumel = local ? slice.numel() : p.numel;
    p.localBatch = local ? pp.local_batch() : pp.batch();
    p.localRows = local ? pp.local_rows() : pp.rows();
    p.localCols = local ? pp.local_cols() : pp.cols();
    // Muon runs on this rank's own matrices: a tensor dim split unevenly
    // before the matrix dims leaves it fewer than the largest slice's.
    p.sliceBatch = p.localBatch;
    if (local && p.muon && !pp.conv() && slice.shape.size() >= 2) {
      p.sliceBatch = 1;
      for (size_t k = 0; k + 2 < slice.shape.size(); ++k)
        p.sliceBatch *= slice.shape[k];
    }
    // The form the plan priced (three_gemm in plans before 1.3).
    p.nsForm = pp.ns_form() == plan::NsForm::gram        ? kernels::NsForm::Gram
               : pp.ns_form() == plan::NsForm::symmetric ? kernels::NsForm::Symmetric
                                                         : kernels::NsForm::ThreeGemm;
    if (p.muon && pp.block_sizes() && pp.block_sizes()->size()) {
      p.blocks.dim = pp.block_dim();
      p.blocks.sizes.assign(pp.block_sizes()->begin(), pp.block_sizes()->end());
      // The verifier checked the sizes against the whole matrix; a matrix
      // NS runs on locally must be that one.
      const bool gathered = pp.group() == plan::ShardingGroupKind::comm;
      const int64_t extent = p.blocks.dim == plan::BlockDim::rows
                                 ? (gathered ? pp.rows() : p.localRows)
                                 : (gathered ? pp.cols() : p.localCols);
      int64_t sum = 0;
      for (int64_t s : p.blocks.sizes)
        sum += s;
      if (sum != extent)
        return {DMUON_ERROR_INVALID_PLAN,
                "param '" + p.name + "': its blocks sum to " + std::to_string(sum) + " " +
                    plan::EnumNameBlockDim(p.blocks.dim) + ", but the matrix NS runs on has " +
                    std::to_string(extent)};
    }
    if (p.muon && pp.group() == plan::ShardingGroupKind::comm) {
      const int d = pp.gather_mesh_dim(), td = pp.gather_tensor_dim();
      MatrixGather &gather = p.gather;
      gather.active = true;
      DMUON_RETURN_IF_ERROR(topo.groupAlong(backend, {d}, gather.group));
      gather.size = topo.dimSizes[d];
      gather.coord = topo.coord[d];
      gather.computeIndex = pp.compute_index();
      for (int k = 0; k < static_cast<int>(slice.shape.size()); ++k) {
        if (k < td)
          gather.concatOuter *= slice.shape[k];
        else if (k > td)
          gather.concatInner *= slice.shape[k];
      }
      // The rows of td each gather coordinate holds: td chunked by the mesh
      // dims before d first (the same for the whole gather group), then by d.
      std::vector<int64_t> c = coordOf(topo);
      for (int k = 0; k < gather.size; ++k) {
        c[d] = k;
        gather.chunks.push_back(common::localSliceOf(full, layout, c).shape[td]);
      }
    }
    // The data-carrying dims it is Replicate on (the verifier checked the
    // list against the placements in plans from 1.4 on; older ones spanning
    // such dims are refused above).
    std::vector<int> dataDims;
    if (pp.data_dims() && planHas(plan.root(), PlanFeature::DataCarryingDims))
      dataDims.assign(pp.data_dims()->begin(), pp.data_dims()->end());
    if (p.route == plan::Route::owner) {
      DMUON_RETURN_IF_ERROR(ownerColumn(pp, *units->Get(pp.unit()), dataDims, topo, backend, p));
      p.countsInNorm = p.owner.isOwner && firstModelParallelCopy(pp, topo, dataDims);
      continue;
    }
    p.along.size = topo.sizeAlong(dataDims);
    if (p.along.size > 1)
      DMUON_RETURN_IF_ERROR(topo.groupAlong(backend, dataDims, p.along.group));
    if (p.route == plan::Route::sharded) {
      FlatShard &shard = p.shard;
      p.group = pp.hook_group();
      shard.elements = pp.shard_elements();
      shard.begin = std::min(p.numel, static_cast<int64_t>(topo.s) * shard.elements);
      shard.real = std::min(shard.elements, p.numel - shard.begin);
      // Every replicate row holds the same shards: row 0 counts them.
      p.countsInNorm = topo.r == 0 && firstModelParallelCopy(pp, topo);
    } else if (p.route == plan::Route::host) {
      p.bound = true; // nothing of it is the runtime's
    } else {
      p.countsInNorm = topo.s == 0 && topo.r == 0 && firstModelParallelCopy(pp, topo);
    }
  }
  // Another stage's params were set up as every rank's (so that every rank
  // creates the same communicators in the same order), and are left alone.
  for (ParamRt &p : out)
    if (p.plan->pipeline_stage() != topo.stage) {
      p.route = plan::Route::host;
      p.countsInNorm = false;
      p.bound = true;
      p.owner.isOwner = p.owner.keepsMaster = false;
      p.gather.active = false;
    }
  return Status::ok();
}

} // namespace dmuon::rt
