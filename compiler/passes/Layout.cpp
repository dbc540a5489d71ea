// layout: one contiguous, aligned segment per (hook group, owner) in the
// group's packed buffer, so each owner's params move in one collective; the
// reduce buffer has the same segments in fp32. A group's sharded params
// follow its segments, padded to equal flat shards. The per-rank figures
// are an analysis of the laid-out plan, the pipeline's next entry
// (passes/RankFigures.cpp).
#include "Passes.h"
#include "common/Routes.h"
#include "common/PlanRules.h"

#include <algorithm>
#include <map>

namespace dmuon {

namespace {

int64_t alignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

using common::kReduceElementBytes;

} // namespace

bool runLayout(PlanModel &model, Diagnostics &) {
  const Mesh &mesh = model.mesh;
  const int64_t align = model.options.alignment;
  const int64_t G = mesh.numShards(), D = mesh.dataCarryingSize();

  // Every rank holds and moves its local shard; a sharded param's buffers
  // hold it padded to G equal flat shards. The same walk collects the comm
  // params (one pass over the params, which at 1M are 384 MB).
  std::vector<int> comm;
  for (size_t i = 0; i < model.params.size(); ++i) {
    Param &p = model.params[i];
    if (p.role == Role::muon && p.group == ShardingGroupKind::comm && p.unit >= 0 &&
        p.gatherMeshDim >= 0)
      comm.push_back(static_cast<int>(i));
    const int64_t local = p.localNumElements();
    p.bytes = local * common::dtypeBytes(p.dtype);
    if (p.route == Route::owner)
      p.reduceBytes = local * kReduceElementBytes;
    if (p.route == Route::sharded) {
      p.shardElements = common::shardElements(local, G);
      p.bytes = p.shardElements * G * common::dtypeBytes(p.dtype);
      p.reduceBytes = p.shardElements * G * kReduceElementBytes;
    }
  }

  // compute_index of comm params: per owner (fine slot) and gather mesh dim,
  // LPT over the coordinates of that dim (largest cost first, ties by name;
  // each to the coordinate with the least comm NS load so far, ties to the
  // lower).
  {
    std::sort(comm.begin(), comm.end(), [&](int a, int b) {
      const Param &x = model.params[a], &y = model.params[b];
      if (x.cost != y.cost)
        return x.cost > y.cost;
      if (x.name != y.name)
        return x.name < y.name;
      return a < b;
    });
    std::map<std::pair<int64_t, int>, std::vector<double>> load; // (fine slot, mesh dim)
    for (int i : comm) {
      Param &p = model.params[i];
      const Unit &u = model.units[p.unit];
      const int64_t fine = (u.pipelineStage * mesh.numSlots() + u.slot) * D + u.dataIndex;
      std::vector<double> &l = load[{fine, p.gatherMeshDim}];
      if (l.empty())
        l.assign(static_cast<size_t>(mesh.dims[p.gatherMeshDim].size), 0.0);
      size_t best = 0;
      for (size_t c = 1; c < l.size(); ++c)
        if (l[c] < l[best])
          best = c;
      l[best] += p.cost;
      p.computeIndex = static_cast<int>(best);
    }
  }

  for (HookGroup &g : model.hookGroups) {
    // One segment per owner and data class: ascending owner rank, then the
    // data-carrying dims its params are Replicate on (the group its phase-2
    // reduce and replicate broadcast span).
    std::map<std::pair<int64_t, std::vector<int>>, Segment> byOwner;
    std::vector<int> sharded;
    for (int i : g.params) {
      const Param &p = model.params[i];
      if (p.route == Route::sharded) {
        sharded.push_back(i);
        continue;
      }
      const Unit &u = model.units[p.unit];
      const int64_t rank = mesh.ownerRank(u.slot % G, u.slot / G, u.dataIndex, u.pipelineStage);
      Segment &seg = byOwner[{rank, p.dataDims}];
      seg.slot = u.slot;
      seg.dataIndex = u.dataIndex;
      seg.ownerRank = rank;
      seg.params.push_back(i);
    }
    int64_t offset = 0, reduceOffset = 0;
    for (auto &[key, seg] : byOwner) {
      seg.offset = offset;
      seg.reduceOffset = reduceOffset;
      for (int i : seg.params) {
        Param &p = model.params[i];
        p.offset = offset;
        p.reduceOffset = reduceOffset;
        offset = alignUp(offset + p.bytes, align);
        reduceOffset = alignUp(reduceOffset + p.reduceBytes, align);
      }
      seg.bytes = offset - seg.offset;
      seg.reduceBytes = reduceOffset - seg.reduceOffset;
      g.segments.push_back(std::move(seg));
    }
    // After the segments: each sharded param's padded values and gradient,
    // then the reduce-scatter results (this rank's shard of each gradient).
    for (int i : sharded) {
      Param &p = model.params[i];
      p.offset = offset;
      p.reduceOffset = reduceOffset;
      offset = alignUp(offset + p.bytes, align);
      reduceOffset = alignUp(reduceOffset + p.reduceBytes, align);
    }
    for (int i : sharded) {
      Param &p = model.params[i];
      p.shardOffset = reduceOffset;
      reduceOffset = alignUp(reduceOffset + p.shardElements * kReduceElementBytes, align);
    }
    g.bufferBytes = offset;
    g.reduceBufferBytes = reduceOffset;
    model.stats.maxOwnersPerHookGroup =
        std::max(model.stats.maxOwnersPerHookGroup, static_cast<int>(g.segments.size()));
  }

  return true;
}

} // namespace dmuon
