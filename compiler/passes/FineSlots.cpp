// Placing units over the fine slots (passes/FineSlots.h).
#include "passes/FineSlots.h"
#include "passes/LowerBound.h"

#include <algorithm>

namespace dmuon {

namespace {

// Places the units over the fine slots (docs/partition.md, "Data-carrying
// dims"). A unit of data class c (its params Replicate on the data-carrying
// dims classDims[c]) takes one class slot k = slot * D_c + e, e its
// coordinates on those dims, and runs on every fine slot that shares them:
// the ones that differ on the other data-carrying dims, which shard its
// params. The classes are placed in the order of `sequence`, each by
// partitionUnits on top of the loads the others placed so far leave (a
// class slot starting at the largest load of the fine slots it covers); a
// class listed again is taken off and placed anew. The result's slotOf is
// the owner slot (s + r * G), `dataIndex` the data index per unit, and its
// loads are per fine slot. The names of `all` are lent to each class's
// problem and given back: at a million units a copy of the names would be
// a cost of its own, for nothing.
PartitionResult partitionInOrder(const Mesh &mesh, const std::vector<std::vector<int>> &classDims,
                                 PartitionProblem &all, const std::vector<int> &unitClass,
                                 const PartitionOptions &opts, double target,
                                 const std::vector<int> &sequence,
                                 std::vector<int64_t> &dataIndex) {
  const int64_t S = mesh.numSlots(), D = mesh.dataCarryingSize();
  const size_t n = all.cost.size();
  dataIndex.assign(n, 0);
  PartitionResult res;
  res.slotOf.assign(n, -1);
  res.load.assign(static_cast<size_t>(S * D), 0.0);
  std::vector<bool> placed(classDims.size(), false);
  std::vector<int> violations(classDims.size(), 0); // of each class's latest placement
  for (int c : sequence) {
    const std::vector<int> &dims = classDims[c];
    const int64_t Dc = mesh.sizeOfDims(dims);
    std::vector<int64_t> projOf(static_cast<size_t>(D));
    for (int64_t d = 0; d < D; ++d)
      projOf[d] = mesh.projectDataIndex(d, dims);
    // The fine slots of unit u (placed): where its cost lands.
    auto addUnit = [&](size_t u, double sign) {
      const int64_t e = mesh.projectDataIndex(dataIndex[u], dims);
      for (int64_t d = 0; d < D; ++d)
        if (projOf[d] == e)
          res.load[static_cast<size_t>(res.slotOf[u] * D + d)] += sign * all.cost[u];
    };
    PartitionProblem sub;
    sub.slots = static_cast<int>(S * Dc);
    std::vector<size_t> members;
    for (size_t u = 0; u < n; ++u)
      if (unitClass[u] == c) {
        members.push_back(u);
        sub.cost.push_back(all.cost[u]);
        sub.layer.push_back(all.layer[u]);
        sub.name.push_back(std::move(all.name[u]));
        if (placed[c])
          addUnit(u, -1);
      }
    if (members.empty())
      continue;
    PartitionOptions o = opts;
    if (std::none_of(placed.begin(), placed.end(), [](bool b) { return b; })) {
      // Nothing placed yet: this class alone, against its own bound (the
      // later classes fill around it).
      if (classDims.size() > 1) {
        const double own = strongLowerBound(sub.cost, sub.slots).value;
        o.lowerBound = own;
        if (o.layerTarget > 0)
          o.layerTarget = target * own;
      }
    } else {
      sub.initialLoad.assign(static_cast<size_t>(sub.slots), 0.0);
      for (int64_t slot = 0; slot < S; ++slot)
        for (int64_t d = 0; d < D; ++d) {
          double &l = sub.initialLoad[static_cast<size_t>(slot * Dc + projOf[d])];
          l = std::max(l, res.load[static_cast<size_t>(slot * D + d)]);
        }
    }
    placed[c] = true;
    const PartitionResult r = partitionUnits(sub, o);
    for (size_t j = 0; j < members.size(); ++j)
      all.name[members[j]] = std::move(sub.name[j]);
    for (size_t j = 0; j < members.size(); ++j) {
      const size_t u = members[j];
      const int64_t k = r.slotOf[j];
      res.slotOf[u] = static_cast<int>(k / Dc);
      dataIndex[u] = mesh.embedDataIndex(k % Dc, dims);
      addUnit(u, +1);
    }
    res.lptMaxLoad = std::max(res.lptMaxLoad, r.lptMaxLoad);
    res.refinementMoves += r.refinementMoves;
    res.lptLayerViolations += r.lptLayerViolations;
    violations[static_cast<size_t>(c)] = r.layerViolations;
  }
  for (int v : violations)
    res.layerViolations += v;
  res.maxLoad = res.load.empty() ? 0 : *std::max_element(res.load.begin(), res.load.end());
  return res;
}

} // namespace

PartitionResult partitionFine(const Mesh &mesh, const std::vector<std::vector<int>> &classDims,
                              PartitionProblem &all, const std::vector<int> &unitClass,
                              const PartitionOptions &opts, double target,
                              std::vector<int64_t> &dataIndex) {
  std::vector<int> coarseFirst(classDims.size());
  for (size_t c = 0; c < coarseFirst.size(); ++c)
    coarseFirst[c] = static_cast<int>(c);
  std::sort(coarseFirst.begin(), coarseFirst.end(), [&](int a, int b) {
    if (classDims[a].size() != classDims[b].size())
      return classDims[a].size() < classDims[b].size();
    return classDims[a] < classDims[b];
  });
  std::vector<std::vector<int>> sequences = {coarseFirst};
  if (classDims.size() > 1) {
    const std::vector<int> fineFirst(coarseFirst.rbegin(), coarseFirst.rend());
    sequences.push_back(fineFirst);
    std::vector<int> refill = fineFirst;
    refill.insert(refill.end(), coarseFirst.begin() + 1, coarseFirst.end());
    sequences.push_back(refill);
  }
  PartitionResult best;
  for (size_t i = 0; i < sequences.size(); ++i) {
    std::vector<int64_t> index;
    PartitionResult r =
        partitionInOrder(mesh, classDims, all, unitClass, opts, target, sequences[i], index);
    if (i == 0 || r.maxLoad < best.maxLoad) {
      best = std::move(r);
      dataIndex = std::move(index);
    }
  }
  return best;
}

} // namespace dmuon
