// An analysis after layout: every rank's memory and per-step communication
// figures, the ones the runtime's counters and its allocation report are checked
// against (accounting rules: docs/plan-format.md). Ranks that differ only in
// pure model-parallel dims (and data-carrying dims that shard what they
// own) see the same data-parallel traffic of their local shards; comm
// params' gather/scatter and NS are added per rank.
#include "Passes.h"
#include "common/MatrixOptimizers.h"
#include "common/PlanRules.h"

#include <algorithm>
#include <unordered_map>

namespace dmuon {

namespace {

using common::kReduceElementBytes;
constexpr int64_t kValueBytes = 4;      // fp32 master / shard values
constexpr int64_t kMomentBytes = 2 * 4; // AdamW's two fp32 moments

// How many ranks a param's gradient is summed over along the data-carrying
// dims it is Replicate on (1: none).
int64_t alongDataSize(const Mesh &mesh, const Param &p) {
  int64_t n = 1;
  for (int d : p.dataDims)
    n *= mesh.dims[d].size;
  return n;
}

// The owner route, per fine slot (s, r, d) (index (r * G + s) * D + d):
// masters on the owner's shard column (I2: every replica and data
// coordinate of shard s), optimizer state and reduced gradients on the
// owner, the two-phase reduce and the replicate broadcast, whose second
// phase spans the segment's column: dp_replicate and the data-carrying dims
// its params are Replicate on.
//
// Only the shard columns that own segments are stored (`columns`, and in
// `byFine` their fine slots); every other fine slot has `idle`'s figures,
// so memory grows with the segments, not with the world size.
struct OwnerRoute {
  struct Column {
    int64_t bytes = 0, reduceBytes = 0;
    std::vector<int64_t> staging; // per hook group of the stage: its replicate staging
  };
  std::unordered_map<int64_t, Column> columns;     // by shard s
  std::unordered_map<int64_t, RankFigures> byFine; // fine slots of those columns
  RankFigures idle;
};

// A pipeline stage's share of the model: its hook groups, [firstGroup,
// endGroup) (a stage's groups are one contiguous run; another stage's inside
// it would count nothing), and its params. Each stage's figures read its own
// share only, so that time and memory grow with stages + groups, not with
// their product.
struct StageShare {
  int stage = 0;
  size_t firstGroup = 0, endGroup = 0;
  std::vector<int> params;
};

std::vector<StageShare> stageShares(const PlanModel &model) {
  std::vector<StageShare> out(static_cast<size_t>(model.mesh.numStages()));
  for (size_t s = 0; s < out.size(); ++s)
    out[s].stage = static_cast<int>(s);
  std::vector<bool> seen(out.size(), false);
  for (size_t gi = 0; gi < model.hookGroups.size(); ++gi) {
    StageShare &share = out[static_cast<size_t>(model.hookGroups[gi].pipelineStage)];
    if (!seen[static_cast<size_t>(share.stage)])
      share.firstGroup = gi;
    seen[static_cast<size_t>(share.stage)] = true;
    share.endGroup = gi + 1;
  }
  for (size_t i = 0; i < model.params.size(); ++i)
    out[static_cast<size_t>(model.params[i].pipelineStage)].params.push_back(static_cast<int>(i));
  return out;
}

// Pipeline stage `share.stage`'s owner route: only its hook groups (its ranks
// hold and move no other stage's params).
OwnerRoute ownerRoute(const PlanModel &model, const StageShare &share) {
  const int stage = share.stage;
  const Mesh &mesh = model.mesh;
  const int64_t G = mesh.numShards(), R = mesh.numReplicas(), D = mesh.dataCarryingSize();
  const int64_t unshardsPerStep = model.options.mode == Mode::z3 ? 2 : 1;
  OwnerRoute out;
  const common::PreconditionCaps caps{model.options.optimizer.soapMaxPrecondDim,
                                      model.options.optimizer.shampooMaxPreconditionerDim};
  int64_t totalBytes = 0, totalReduceBytes = 0;
  for (size_t gi = share.firstGroup; gi < share.endGroup; ++gi) {
    if (model.hookGroups[gi].pipelineStage != stage)
      continue;
    for (const Segment &seg : model.hookGroups[gi].segments) {
      const int64_t so = seg.slot % G, ro = seg.slot / G;
      const std::vector<int> &dataDims = model.params[seg.params.front()].dataDims;
      const int64_t column = R * mesh.sizeOfDims(dataDims);
      const int64_t ownerData = mesh.projectDataIndex(seg.dataIndex, dataDims);
      OwnerRoute::Column &col = out.columns[so];
      col.staging.resize(share.endGroup - share.firstGroup, 0);
      col.bytes += seg.bytes;
      col.reduceBytes += seg.reduceBytes;
      totalBytes += seg.bytes;
      totalReduceBytes += seg.reduceBytes;
      int64_t master = 0, elements = 0, muonElements = 0, adamwElements = 0;
      double flops = 0;
      for (int i : seg.params) {
        const Param &p = model.params[i];
        const int64_t local = p.localNumElements();
        master += local * kValueBytes;
        elements += local;
        if (p.role == Role::muon && common::preconditions(p.matrixOptimizer))
          muonElements += common::matrixStateElements(p.matrixOptimizer, p.localBatch, p.localRows,
                                                      p.localCols, caps);
        else if (p.role == Role::muon) // its rule's state (common/MatrixOptimizers.h)
          muonElements += common::matrixStateElements(
              p.matrixOptimizer, 1, local / std::max<int64_t>(1, p.localCols), p.localCols);
        else
          adamwElements += local;
        // A comm param's NS runs on one rank of its gather group (below).
        if (p.role == Role::muon && p.group != ShardingGroupKind::comm)
          flops += p.cost;
      }
      if (column > 1)
        col.staging[gi - share.firstGroup] += master;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t d = 0; d < D; ++d) {
          RankFigures &f = out.byFine[(r * G + so) * D + d];
          const bool owner = r == ro && mesh.projectDataIndex(d, dataDims) == ownerData;
          f.masterBytes += master;
          if (column > 1) {
            // Phase 2 reduce down the column, then the replicate broadcast
            // of the updated fp32 master.
            if (owner) {
              f.reduceRecv += (column - 1) * seg.reduceBytes;
              f.replicateSend += (column - 1) * master;
            } else {
              f.reduceSend += seg.reduceBytes;
              f.replicateRecv += master;
            }
          }
          if (owner) {
            f.ownedParams += static_cast<int>(seg.params.size());
            f.ownedElements += elements;
            f.momentumBytes += muonElements * kValueBytes;
            f.adamMomentBytes += adamwElements * kMomentBytes;
            f.gradBytes += elements * kReduceElementBytes; // I3, from reduce to step
            f.nsFlops += flops;
          }
        }
    }
  }
  if (G > 1) {
    // Broadcast per unshard inside each shard group; phase 1 reduce to the
    // group's shard owner.
    auto addShardGroup = [&](RankFigures &f, const OwnerRoute::Column *col) {
      const int64_t bytes = col ? col->bytes : 0, reduceBytes = col ? col->reduceBytes : 0;
      f.broadcastSend += unshardsPerStep * (G - 1) * bytes;
      f.broadcastRecv += unshardsPerStep * (totalBytes - bytes);
      f.reduceRecv += (G - 1) * reduceBytes;
      f.reduceSend += totalReduceBytes - reduceBytes;
    };
    for (auto &[fine, f] : out.byFine)
      addShardGroup(f, &out.columns.at(fine / D % G));
    addShardGroup(out.idle, nullptr);
  }
  return out;
}

// The sharded and replicated routes: the same on every rank of a stage.
RankFigures otherRoutes(const PlanModel &model, const StageShare &share) {
  const Mesh &mesh = model.mesh;
  const int64_t G = mesh.numShards(), R = mesh.numReplicas();
  const int64_t unshardsPerStep = model.options.mode == Mode::z3 ? 2 : 1;
  RankFigures f;
  for (int i : share.params) {
    const Param &p = model.params[static_cast<size_t>(i)];
    if (p.route != Route::sharded && p.route != Route::replicated)
      continue;
    const int64_t along = alongDataSize(mesh, p);
    if (p.route == Route::sharded) {
      const int64_t shard = p.shardElements;
      f.valueBytes += shard * kValueBytes;
      f.adamMomentBytes += shard * kMomentBytes;
      f.gradBytes += shard * kReduceElementBytes;
      if (G > 1) {
        const int64_t values = unshardsPerStep * (G - 1) * shard * common::dtypeBytes(p.dtype);
        f.allgatherSend += values;
        f.allgatherRecv += values;
        f.reduceScatterSend += (G - 1) * shard * kReduceElementBytes;
        f.reduceScatterRecv += (G - 1) * shard * kReduceElementBytes;
      }
      // The shard's sum over dp_replicate, then along the data-carrying dims.
      f.allreduceBytes +=
          (R > 1 ? shard * kReduceElementBytes : 0) + (along > 1 ? shard * kReduceElementBytes : 0);
    } else if (p.route == Route::replicated) {
      const int64_t local = p.localNumElements();
      f.valueBytes += local * kValueBytes;
      f.adamMomentBytes += local * kMomentBytes;
      f.gradBytes += local * kReduceElementBytes;
      f.allreduceBytes += (G * R > 1 ? local * kReduceElementBytes : 0) +
                          (along > 1 ? local * kReduceElementBytes : 0);
    }
  }
  return f;
}

// Each hook group's buffer bytes, in order, of one pipeline stage's run of
// groups: peakBuffers walks them once per shard column, and a model of 1M
// params has 1M groups, so the walks read 16 bytes a group instead of whole
// HookGroups. Another stage's groups inside the run count 0 bytes.
struct GroupBufferBytes {
  std::vector<int64_t> values, grads;
  GroupBufferBytes(const std::vector<HookGroup> &groups, const StageShare &share) {
    values.reserve(share.endGroup - share.firstGroup);
    grads.reserve(share.endGroup - share.firstGroup);
    for (size_t gi = share.firstGroup; gi < share.endGroup; ++gi) {
      const HookGroup &g = groups[gi];
      const bool own = g.pipelineStage == share.stage;
      values.push_back(own ? g.bufferBytes : 0);
      grads.push_back(own ? g.reduceBufferBytes : 0);
    }
  }
};

// The most bytes of hook-group buffers (packed values, gradients) and
// replicate staging live at once, following the executor through one step
// whose host calls the hooks in order: forward with prefetch of the next
// group; backward in reverse, where a group's gradient buffer lives from its
// pre_backward until post_backward of the group two after it in backward
// order (its reduce has completed by then: OwnerRoute's pipeline); the
// replicate broadcast's staging kept (async) until the next unshard of its
// group consumes it.
int64_t peakBuffers(const PlanModel &model, const GroupBufferBytes &bytes,
                    const std::vector<int64_t> &groupStaging) {
  const std::vector<int64_t> &values = bytes.values, &grads = bytes.grads;
  const size_t n = values.size();
  const bool z3 = model.options.mode == Mode::z3;
  const bool async = model.options.replicateAsync;
  std::vector<int64_t> staging = async ? groupStaging : std::vector<int64_t>(n, 0);
  std::vector<bool> unsharded(n, false);
  int64_t live = 0, peak = 0;
  for (int64_t b : staging)
    live += b;
  // As the runtime: a group's staging is consumed before its buffer is
  // allocated.
  auto unshard = [&](size_t g) {
    if (unsharded[g])
      return;
    live += values[g] - staging[g];
    staging[g] = 0;
    unsharded[g] = true;
    peak = std::max(peak, live);
  };
  for (size_t g = 0; g < n; ++g) {
    unshard(g);
    if (g + 1 < n)
      unshard(g + 1);
    if (z3) {
      live -= values[g];
      unsharded[g] = false;
    }
  }
  std::vector<bool> gradLive(n, false);
  for (size_t g = n; g-- > 0;) {
    unshard(g);
    live += grads[g];
    gradLive[g] = true;
    peak = std::max(peak, live);
    live -= values[g];
    unsharded[g] = false;
    if (g + 2 < n) {
      live -= grads[g + 2];
      gradLive[g + 2] = false;
    }
  }
  for (size_t g = 0; g < n; ++g)
    if (gradLive[g])
      live -= grads[g];
  for (size_t g = 0; g < n; ++g) {
    live += groupStaging[g];
    peak = std::max(peak, live);
    if (!async)
      live -= groupStaging[g];
  }
  return peak;
}

// What every rank of one pipeline stage shares: its owner route, its other
// routes and its buffer peaks per shard column.
struct StageFigures {
  OwnerRoute owner;
  RankFigures others;
  std::unordered_map<int64_t, int64_t> peakOfColumn;
  int64_t idlePeak = 0;
};

StageFigures stageFigures(const PlanModel &model, const StageShare &share) {
  StageFigures out;
  out.owner = ownerRoute(model, share);
  out.others = otherRoutes(model, share);
  // Per shard column: the peak of buffers (the staging differs by column;
  // a column without segments stages nothing). The staging is not needed
  // after: every stage's figures are kept for the walk over the ranks.
  const GroupBufferBytes groupBytes(model.hookGroups, share);
  for (auto &[s, col] : out.owner.columns) {
    out.peakOfColumn[s] = peakBuffers(model, groupBytes, col.staging);
    col.staging = {};
  }
  out.idlePeak =
      peakBuffers(model, groupBytes, std::vector<int64_t>(groupBytes.values.size(), 0));
  return out;
}

} // namespace

bool runRankFigures(PlanModel &model, Diagnostics &) {
  const Mesh &mesh = model.mesh;
  const int64_t G = mesh.numShards();
  const int64_t D = mesh.dataCarryingSize();
  // Comm params' gather/scatter, and Muon params whose batch dims split
  // unevenly, by owner slot: a rank of that slot owns one when its data
  // coordinates match on the dims the param is Replicate on (each coordinate
  // of a data-carrying dim that shards it owns its own slice).
  // Both need a model-parallel mesh dim: on ownership dims alone no param
  // is gathered or chunked, and the params are not walked.
  // Keyed by stage * S + slot: each stage's owners are its own ranks.
  const int64_t S = mesh.numSlots();
  std::unordered_map<int64_t, std::vector<int>> commBySlot, unevenBySlot;
  bool modelParallel = false;
  for (int d = 0; d < static_cast<int>(mesh.dims.size()); ++d)
    modelParallel |= !mesh.isOwnershipDim(d);
  for (size_t i = 0; modelParallel && i < model.params.size(); ++i) {
    const Param &p = model.params[i];
    if (p.role != Role::muon || p.unit < 0)
      continue;
    const Unit &unit = model.units[p.unit];
    const int64_t slot = unit.pipelineStage * S + unit.slot;
    if (p.group == ShardingGroupKind::comm) {
      if (p.gatherMeshDim >= 0)
        commBySlot[slot].push_back(static_cast<int>(i));
      continue;
    }
    if (!chunkedByModelParallelDims(p, mesh))
      continue; // its batch is whole on every rank
    const common::ShardLayout layout = shardLayoutOf(p, mesh);
    bool splits = false;
    for (size_t d = 0; d < p.shape.size(); ++d)
      splits |= common::chunkSizesOf(p.shape[d], layout, static_cast<int>(d)).size() > 1;
    if (splits)
      unevenBySlot[slot].push_back(static_cast<int>(i));
  }
  auto ownedAt = [&](const Param &p, int64_t dataIndex) {
    return mesh.projectDataIndex(dataIndex, p.dataDims) ==
           mesh.projectDataIndex(model.units[p.unit].dataIndex, p.dataDims);
  };
  // A rank runs NS on its own matrices only: where a Muon param's batch
  // dims split unevenly, fewer than the largest slice's at the last
  // coordinates, whose count the unit's cost counts.
  auto ownBatch = [&](const Param &p, const std::vector<int64_t> &coord) {
    const common::LocalSlice own = common::localSliceOf(p.shape, shardLayoutOf(p, mesh), coord);
    return static_cast<double>(matrixViewOf(own.shape, p.conv).batch);
  };

  std::vector<StageFigures> stages;
  for (const StageShare &share : stageShares(model))
    stages.push_back(stageFigures(model, share));

  // Runs of equal figures are stored once (plan 1.6: Stats.rank_runs):
  // memory and the plan stay O(runs) while the walk is O(world size), with
  // the coordinates stepped row-major instead of decoded per rank.
  model.stats.ranks.clear();
  std::vector<int64_t> c(mesh.dims.size(), 0);
  bool lastIdle = false;
  int64_t lastStage = 0;
  for (int64_t rank = 0; rank < mesh.worldSize(); ++rank) {
    if (rank > 0)
      for (size_t k = c.size(); k-- > 0;) {
        if (++c[k] < mesh.dims[k].size)
          break;
        c[k] = 0;
      }
    const int64_t s = mesh.shardDim >= 0 ? c[mesh.shardDim] : 0;
    const int64_t r = mesh.replicateDim >= 0 ? c[mesh.replicateDim] : 0;
    const int64_t slot = r * G + s;
    const int64_t stage = mesh.stageOf(c);
    const StageFigures &sf = stages[static_cast<size_t>(stage)];
    const OwnerRoute &owner = sf.owner;
    const int64_t dataIndex = D > 1 ? mesh.dataIndexOf(c) : 0;
    auto ownerIt = owner.byFine.find(slot * D + dataIndex);
    auto commIt = commBySlot.find(stage * S + slot);
    auto unevenIt = unevenBySlot.find(stage * S + slot);
    const bool idle = ownerIt == owner.byFine.end() && commIt == commBySlot.end() &&
                      unevenIt == unevenBySlot.end();
    // Consecutive idle ranks of one stage share one row: nothing to compute
    // or compare.
    const bool sameStage = stage == lastStage;
    lastStage = stage;
    if (idle && lastIdle && sameStage)
      continue;
    RankFigures f = ownerIt != owner.byFine.end() ? ownerIt->second : owner.idle;
    if (unevenIt != unevenBySlot.end())
      for (int i : unevenIt->second) {
        const Param &p = model.params[i];
        if (ownedAt(p, dataIndex))
          f.nsFlops += p.cost * ownBatch(p, c) / static_cast<double>(p.localBatch) - p.cost;
      }
    if (commIt != commBySlot.end())
      for (int i : commIt->second) {
        // Gathered over the gather mesh dim to the computing member,
        // orthogonalized there, scattered back (fp32 local slices).
        const Param &p = model.params[i];
        if (!ownedAt(p, dataIndex))
          continue;
        const int64_t K = mesh.dims[p.gatherMeshDim].size;
        const int64_t L = p.localNumElements() * kValueBytes;
        if (c[p.gatherMeshDim] == p.computeIndex) {
          f.nsFlops += p.cost * ownBatch(p, c) / static_cast<double>(p.localBatch);
          f.gatherRecv += (K - 1) * L;
          f.scatterSend += (K - 1) * L;
        } else {
          f.gatherSend += L;
          f.scatterRecv += L;
        }
      }
    const RankFigures &others = sf.others;
    auto peakIt = sf.peakOfColumn.find(s);
    f.rank = rank;
    f.peakBufferBytes = peakIt != sf.peakOfColumn.end() ? peakIt->second : sf.idlePeak;
    f.allreduceBytes = others.allreduceBytes;
    f.allgatherSend = others.allgatherSend;
    f.allgatherRecv = others.allgatherRecv;
    f.reduceScatterSend = others.reduceScatterSend;
    f.reduceScatterRecv = others.reduceScatterRecv;
    f.valueBytes = others.valueBytes;
    f.adamMomentBytes += others.adamMomentBytes;
    f.gradBytes += others.gradBytes;
    f.memoryBytes = f.masterBytes + f.momentumBytes + f.valueBytes + f.adamMomentBytes +
                    f.gradBytes + f.peakBufferBytes;
    // lastIdle: the last row is the idle ranks' figures.
    if (model.stats.ranks.empty() || !sameFigures(model.stats.ranks.back(), f)) {
      model.stats.ranks.push_back(f);
      lastIdle = idle;
    }
  }
  return true;
}

} // namespace dmuon
