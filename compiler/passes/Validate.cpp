// validate: every shape and placement makes sense for the mesh, and every
// Muon param is a matrix (docs/dmuonc.md#grouping).
#include "Passes.h"
#include "common/PlanRules.h"

#include <string>

namespace dmuon {

namespace {

using common::kMaxElements;

// The bytes a param adds to the plan's buffers and per-rank figures, with
// margin: 8 bytes per local element (the widest dtype; fp32 masters,
// gradients and momentum; AdamW's two fp32 moments), a sharded param's
// padding to G equal shards, and the alignment gap after it.
int64_t footprintBytes(const Param &p, int64_t localElements, int64_t G, int64_t alignment) {
  const int64_t padding = p.route == Route::sharded ? G : 0;
  return (localElements + padding) * 8 + alignment;
}

} // namespace

common::ShardLayout shardLayoutOf(const Param &p, const Mesh &mesh) {
  common::ShardLayout layout{
      std::vector<int>(p.placements.size(), -1), {}, std::vector<int64_t>(p.placements.size(), 1)};
  for (size_t i = 0; i < p.placements.size(); ++i) {
    layout.meshSizes.push_back(mesh.dims[i].size);
    if (p.placements[i].isShard() && !mesh.isOwnershipDim(static_cast<int>(i)))
      layout.tensorDimOf[i] = p.placements[i].dim;
    if (p.placements[i].kind == PlacementKind::strided_shard)
      layout.splitFactors[i] = p.placements[i].splitFactor;
  }
  return layout;
}

bool chunkedByModelParallelDims(const Param &p, const Mesh &mesh) {
  for (size_t i = 0; i < p.placements.size(); ++i)
    if (p.placements[i].isShard() && !mesh.isOwnershipDim(static_cast<int>(i)))
      return true;
  return false;
}

namespace {

// How diagnostics name a param; built only for a diagnostic: most params of
// a large model have none.
std::string describe(const Param &p) {
  return "param '" + p.name + "' with shape " + shapeString(p.shape);
}

// The shape alone: its rank and size, a Muon param a non-empty matrix, one
// placement per mesh dim. False (with an error) when the param can go no
// further.
bool checkShape(const Param &p, const Mesh &mesh, Diagnostics &diags) {
  const int ndim = static_cast<int>(p.shape.size());
  if (ndim > common::kMaxParamDims) {
    diags.error(p.loc, describe(p) + " has " + std::to_string(ndim) +
                           " dims; a param has at most " + std::to_string(common::kMaxParamDims));
    return false;
  }
  int64_t elems = 1;
  bool overflow = false, empty = false;
  for (int64_t d : p.shape) {
    if (d <= 0)
      empty = true;
    else if (elems > kMaxElements / d)
      overflow = true;
    else
      elems *= d;
  }
  if (overflow) {
    diags.error(p.loc, describe(p) + " has more than 2^48 elements");
    return false;
  }
  if (p.role == Role::muon && ndim < 2) {
    diags.error(p.loc, describe(p) + " cannot use Muon: Muon orthogonalizes matrices and "
                                     "needs at least 2 dims; leave it to AdamW");
    return false;
  }
  if (p.role == Role::muon && empty) {
    diags.error(p.loc, describe(p) + " cannot use Muon: it has no elements");
    return false;
  }
  if (p.placements.size() != mesh.dims.size()) {
    diags.error(p.loc, describe(p) + " has " + std::to_string(p.placements.size()) +
                           " placements for a " + std::to_string(mesh.dims.size()) + "-dim mesh");
    return false;
  }
  return true;
}

// Each Shard placement's tensor dim, made non-negative; true when every one
// is in range and leaves no shard empty.
bool resolvePlacements(Param &p, const Mesh &mesh, Diagnostics &diags) {
  const int ndim = static_cast<int>(p.shape.size());
  bool placementsOk = true;
  for (size_t i = 0; i < p.placements.size(); ++i) {
    Placement &pl = p.placements[i];
    if (!pl.isShard())
      continue;
    int dim = pl.dim < 0 ? pl.dim + ndim : pl.dim;
    if (dim < 0 || dim >= ndim) {
      diags.error(p.loc, describe(p) + ": " + pl.str() + " on mesh dim '" + mesh.dims[i].name +
                             "' is out of range for a " + std::to_string(ndim) + "-D tensor");
      placementsOk = false;
      continue;
    }
    pl.dim = dim;
    if (p.shape[dim] < mesh.dims[i].size) {
      diags.error(p.loc, describe(p) + ": " + pl.str() + " splits dim " + std::to_string(dim) +
                             " of size " + std::to_string(p.shape[dim]) + " over " +
                             std::to_string(mesh.dims[i].size) + " ranks of mesh dim '" +
                             mesh.dims[i].name + "', leaving some shards empty");
      placementsOk = false;
    }
  }
  return placementsOk;
}

// Whether tensor dim d splits as the model-parallel mesh dims that shard it
// say: evenly where a StridedShard interleaves it, and never leaving a rank
// an empty chunk.
bool checkModelParallelDim(const Param &p, const Mesh &mesh, const common::ShardLayout &layout,
                           int d, Diagnostics &diags) {
  int64_t divisor = 1;
  std::string by, strided;
  for (size_t i = 0; i < p.placements.size(); ++i) {
    if (layout.tensorDimOf[i] != d)
      continue;
    divisor *= mesh.dims[i].size;
    const std::string one = p.placements[i].str() + " on mesh dim '" + mesh.dims[i].name + "'";
    by += (by.empty() ? "" : ", ") + one;
    if (p.placements[i].kind == PlacementKind::strided_shard && strided.empty())
      strided = one;
  }
  // A StridedShard's blocks must divide even over a mesh dim of size 1
  // (DTensor asserts it whatever the size; the plan verifier checks it).
  if (divisor == 1 && strided.empty())
    return true;
  const std::vector<int64_t> sizes = common::chunkSizesOf(p.shape[d], layout, d);
  const std::string what =
      describe(p) + ": dim " + std::to_string(d) + " of size " + std::to_string(p.shape[d]);
  // StridedShard(d, k) over n cuts what the mesh dims before it left
  // into k blocks of n sub-blocks each (DTensor's _StridedShard, which
  // asserts they are equal): that extent must divide by k * n.
  std::string blocks;
  int64_t extent = 0;
  if (!strided.empty() && p.shape[d] % divisor == 0)
    if (const int i = common::unevenStridedBlock(p.shape[d], layout, d, extent); i >= 0) {
      const int64_t n = mesh.dims[i].size, k = layout.splitFactorOf(i);
      blocks = " leaves " + std::to_string(extent) + " to " + p.placements[i].str() +
               " on mesh dim '" + mesh.dims[i].name + "', not divisible by " +
               std::to_string(k * n) + " (" + std::to_string(k) + " blocks of " +
               std::to_string(n) + " sub-blocks): " + p.placements[i].str() + " on mesh dim '" +
               mesh.dims[i].name + "' interleaves equal chunks and needs an even split";
    }
  if (!strided.empty() && p.shape[d] % divisor != 0) {
    diags.error(p.loc, what + " is not divisible by " + std::to_string(divisor) + " (" + by +
                           "): " + strided + " interleaves equal chunks and needs an even split");
    return false;
  }
  if (!blocks.empty()) {
    diags.error(p.loc, what + blocks);
    return false;
  }
  if (sizes.front() == 0) {
    diags.error(p.loc, what + " split as torch.chunk does over " + std::to_string(divisor) + " (" +
                           by +
                           ") leaves some ranks an empty shard; every rank must hold part "
                           "of each param it shards");
    return false;
  }
  return true;
}

// The local shard: the model-parallel (non-ownership) mesh dims that shard a
// tensor dim chunk it as torch.chunk does, in mesh order
// (common/ShardChunks.h); uneven chunks are fine, the local shape is the
// largest (coordinate 0's), what buffers and collectives are padded to.
// (Ownership dims are dmuon's: Replicate for Muon params.)
void resolveLocalShape(Param &p, const Mesh &mesh, bool placementsOk, Diagnostics &diags) {
  p.localShape = p.shape;
  if (!placementsOk || !chunkedByModelParallelDims(p, mesh))
    return;
  const common::ShardLayout layout = shardLayoutOf(p, mesh);
  bool sliceOk = true;
  for (int d = 0; d < static_cast<int>(p.shape.size()); ++d)
    if (!checkModelParallelDim(p, mesh, layout, d, diags))
      sliceOk = false;
  if (sliceOk)
    p.localShape = common::largestLocalShape(p.shape, layout);
}

} // namespace

bool runValidate(PlanModel &model, Diagnostics &diags) {
  const Mesh &mesh = model.mesh;
  // Every byte count later passes compute is at most 2·(world + 4) times the
  // params' footprint: a packed buffer or offset holds at most all of it, a
  // rank sends or receives each byte at most twice per peer (Z3 unshards
  // twice), and its memory figures count it a few times. Bounding that keeps
  // every figure of the plan below kMaxPlanByteCount, without overflow.
  const int64_t maxFootprint = common::kMaxPlanByteCount / (2 * (mesh.worldSize() + 4));
  int64_t footprint = 0;
  bool footprintReported = false;
  for (Param &p : model.params) {
    if (!checkShape(p, mesh, diags))
      continue;
    const bool placementsOk = resolvePlacements(p, mesh, diags);
    resolveLocalShape(p, mesh, placementsOk, diags);
    // local <= 2^48 elements and footprint <= maxFootprint: no overflow.
    footprint += footprintBytes(p, p.localNumElements(), mesh.numShards(), model.options.alignment);
    if (footprint > maxFootprint && !footprintReported) {
      diags.error(p.loc, describe(p) + ": the params up to this one need more than " +
                             std::to_string(maxFootprint) +
                             " bytes at 8 bytes per element, too many for a mesh of " +
                             std::to_string(mesh.worldSize()) +
                             " ranks: the plan's per-rank byte figures would pass 2^62");
      footprintReported = true;
    }
    MatrixView local = matrixViewOf(p.localShape, p.conv);
    p.localBatch = local.batch;
    p.localRows = local.rows;
    p.localCols = local.cols;
  }
  validateQkClip(model, diags);
  resolveMatrixBlocks(model, diags);
  return !diags.hasErrors();
}

} // namespace dmuon
