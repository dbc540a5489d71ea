// layout: one contiguous, aligned segment per (hook group, owner) in the
// group's packed buffer, so each owner's params move in one collective; the
// reduce buffer has the same segments in fp32. Also the per-rank memory and
// per-step communication figures the runtime's counters are checked against
// (accounting rule: docs/plan-format.md).
#include "Passes.h"
#include "common/PlanRules.h"

#include <algorithm>
#include <map>

namespace dmuon {

namespace {

int64_t alignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

using common::kReduceElementBytes;
constexpr int64_t kMasterElementBytes = 4;

} // namespace

bool runLayout(PlanModel &model, Diagnostics &) {
  const Mesh &mesh = model.mesh;
  const int64_t align = model.options.alignment;
  const int64_t G = mesh.numShards(), R = mesh.numReplicas(), S = G * R;
  const int64_t unshardsPerStep = model.options.mode == Mode::z3 ? 2 : 1;

  // Every rank holds and moves its local shard.
  for (Param &p : model.params) {
    p.bytes = p.localNumElements() * common::dtypeBytes(p.dtype);
    if (p.role == Role::muon)
      p.reduceBytes = p.localNumElements() * kReduceElementBytes;
  }

  // compute_index of comm params: per owner slot and gather mesh dim, LPT
  // over the coordinates of that dim (largest cost first, ties by name; each
  // to the coordinate with the least comm NS load so far, ties to the lower).
  // commBySlot: the comm params each slot owns, in that order.
  std::vector<std::vector<int>> commBySlot(S);
  {
    std::vector<int> comm;
    for (size_t i = 0; i < model.params.size(); ++i) {
      const Param &p = model.params[i];
      if (p.role == Role::muon && p.group == ShardingGroupKind::comm && p.unit >= 0 &&
          p.gatherMeshDim >= 0)
        comm.push_back(static_cast<int>(i));
    }
    std::sort(comm.begin(), comm.end(), [&](int a, int b) {
      const Param &x = model.params[a], &y = model.params[b];
      if (x.cost != y.cost)
        return x.cost > y.cost;
      if (x.name != y.name)
        return x.name < y.name;
      return a < b;
    });
    std::map<std::pair<int, int>, std::vector<double>> load; // (slot, mesh dim)
    for (int i : comm) {
      Param &p = model.params[i];
      const int slot = model.units[p.unit].slot;
      std::vector<double> &l = load[{slot, p.gatherMeshDim}];
      if (l.empty())
        l.assign(static_cast<size_t>(mesh.dims[p.gatherMeshDim].size), 0.0);
      size_t best = 0;
      for (size_t c = 1; c < l.size(); ++c)
        if (l[c] < l[best])
          best = c;
      l[best] += p.cost;
      p.computeIndex = static_cast<int>(best);
      commBySlot[slot].push_back(i);
    }
  }

  for (HookGroup &g : model.hookGroups) {
    std::map<int64_t, Segment> byOwner; // ascending owner rank
    for (int i : g.params) {
      int slot = model.units[model.params[i].unit].slot;
      int64_t rank = mesh.slotRank(slot % G, slot / G);
      Segment &seg = byOwner[rank];
      seg.slot = slot;
      seg.ownerRank = rank;
      seg.params.push_back(i);
    }
    int64_t offset = 0, reduceOffset = 0;
    for (auto &[rank, seg] : byOwner) {
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
    g.bufferBytes = offset;
    g.reduceBufferBytes = reduceOffset;
    model.stats.maxOwnersPerHookGroup =
        std::max(model.stats.maxOwnersPerHookGroup, static_cast<int>(g.segments.size()));
  }

  // Figures for every slot coordinate (s, r); ranks that differ only in
  // model-parallel dims see the same data-parallel traffic (of their local
  // shards); comm params' gather/scatter and NS are added per rank below.
  // The shard-dim collectives run in every replicate row, so they depend
  // only on the shard column's share.
  std::vector<RankFigures> bySlot(S);
  std::vector<int64_t> columnBytes(G, 0), columnReduceBytes(G, 0);
  int64_t totalBytes = 0, totalReduceBytes = 0;
  for (const HookGroup &g : model.hookGroups) {
    for (const Segment &seg : g.segments) {
      const int64_t so = seg.slot % G, ro = seg.slot / G;
      columnBytes[so] += seg.bytes;
      columnReduceBytes[so] += seg.reduceBytes;
      totalBytes += seg.bytes;
      totalReduceBytes += seg.reduceBytes;
      int64_t master = 0, elements = 0;
      double flops = 0;
      for (int i : seg.params) {
        const Param &p = model.params[i];
        master += p.localNumElements() * kMasterElementBytes;
        elements += p.localNumElements();
        // A comm param's NS runs on one rank of its gather group (below).
        if (p.group != ShardingGroupKind::comm)
          flops += p.cost;
      }
      for (int64_t r = 0; r < R; ++r) {
        RankFigures &f = bySlot[r * G + so];
        f.masterBytes += master; // I2: the owner's whole shard column
        if (R > 1) {
          // Phase 2 reduce down the shard column, then the replicate
          // broadcast of the updated fp32 master.
          if (r == ro) {
            f.reduceRecv += (R - 1) * seg.reduceBytes;
            f.replicateSend += (R - 1) * master;
          } else {
            f.reduceSend += seg.reduceBytes;
            f.replicateRecv += master;
          }
        }
        if (r == ro) {
          f.ownedParams += static_cast<int>(seg.params.size());
          f.ownedElements += elements;
          f.momentumBytes += master;
          f.nsFlops += flops;
        }
      }
    }
  }
  if (G > 1) {
    for (int64_t slot = 0; slot < S; ++slot) {
      RankFigures &f = bySlot[slot];
      const int64_t s = slot % G;
      // Broadcast per unshard inside each replicate row; phase 1 reduce to
      // the row's shard owner.
      f.broadcastSend += unshardsPerStep * (G - 1) * columnBytes[s];
      f.broadcastRecv += unshardsPerStep * (totalBytes - columnBytes[s]);
      f.reduceRecv += (G - 1) * columnReduceBytes[s];
      f.reduceSend += totalReduceBytes - columnReduceBytes[s];
    }
  }

  // Peak unsharded buffers: Z3 holds the current and the prefetched group;
  // Z2 keeps every group after forward. Plus one group's reduce buffer.
  int64_t peak = 0, maxReduce = 0, sum = 0;
  const auto &hg = model.hookGroups;
  for (size_t i = 0; i < hg.size(); ++i) {
    sum += hg[i].bufferBytes;
    maxReduce = std::max(maxReduce, hg[i].reduceBufferBytes);
    int64_t pair = hg[i].bufferBytes + (i + 1 < hg.size() ? hg[i + 1].bufferBytes : 0);
    peak = std::max(peak, pair);
  }
  peak = (model.options.mode == Mode::z3 ? peak : sum) + maxReduce;

  // Replicated (adamw) params: one all-reduce over the data-parallel ranks,
  // then each param's gradient along the data-carrying dims it is Replicate
  // on; owned Muon params' averaged gradients along theirs, by their owners.
  auto alongData = [&](const Param &p) {
    int64_t n = 1;
    for (int d : p.dataDims)
      n *= mesh.dims[d].size;
    return n > 1 ? p.localNumElements() * kMasterElementBytes : 0;
  };
  int64_t adamwPayload = 0, adamwAlongData = 0;
  std::vector<int64_t> slotAlongData(S, 0);
  for (const Param &p : model.params) {
    if (p.role == Role::adamw) {
      adamwPayload += p.localNumElements() * kMasterElementBytes;
      adamwAlongData += alongData(p);
    } else if (p.unit >= 0) {
      slotAlongData[model.units[p.unit].slot] += alongData(p);
    }
  }

  model.stats.ranks.clear();
  for (int64_t rank = 0; rank < mesh.worldSize(); ++rank) {
    std::vector<int64_t> c = mesh.coordOf(rank);
    int64_t s = mesh.shardDim >= 0 ? c[mesh.shardDim] : 0;
    int64_t r = mesh.replicateDim >= 0 ? c[mesh.replicateDim] : 0;
    RankFigures f = bySlot[r * G + s];
    // The comm params this slot owns: gathered over their gather mesh dim
    // to the computing member, orthogonalized there, scattered back (fp32
    // local slices; payload accounting as for broadcast/reduce).
    for (int i : commBySlot[r * G + s]) {
      const Param &p = model.params[i];
      const int64_t K = mesh.dims[p.gatherMeshDim].size;
      const int64_t L = p.localNumElements() * kMasterElementBytes;
      if (c[p.gatherMeshDim] == p.computeIndex) {
        f.nsFlops += p.cost;
        f.gatherRecv += (K - 1) * L;
        f.scatterSend += (K - 1) * L;
      } else {
        f.gatherSend += L;
        f.scatterRecv += L;
      }
    }
    f.rank = rank;
    f.peakBufferBytes = peak;
    f.allreduceBytes = (S > 1 ? adamwPayload : 0) + adamwAlongData;
    f.dataAllreduceBytes = slotAlongData[r * G + s];
    model.stats.ranks.push_back(f);
  }
  return true;
}

} // namespace dmuon
