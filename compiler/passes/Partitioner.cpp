#include "passes/Partitioner.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <unordered_map>

namespace dmuon {

namespace {

uint64_t layerSlotKey(int layer, int slot) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) |
         static_cast<uint32_t>(slot);
}

// Counts of units per (layer, slot); a layer's k units on one slot are k-1
// violations of the same-layer rule.
class LayerSlotCounts {
public:
  int get(int layer, int slot) const {
    auto it = counts_.find(layerSlotKey(layer, slot));
    return it == counts_.end() ? 0 : it->second;
  }
  void add(int layer, int slot, int delta) { counts_[layerSlotKey(layer, slot)] += delta; }

private:
  std::unordered_map<uint64_t, int> counts_;
};

// Violation change when one unit of `layer` leaves `from` and joins `to`.
int moveDelta(const LayerSlotCounts &c, int layer, int from, int to) {
  return (c.get(layer, to) >= 1 ? 1 : 0) - (c.get(layer, from) >= 2 ? 1 : 0);
}

} // namespace

int countLayerViolations(const std::vector<int> &layer, const std::vector<int> &slotOf) {
  std::unordered_map<uint64_t, int> seen;
  int v = 0;
  for (size_t u = 0; u < layer.size(); ++u)
    if (seen[layerSlotKey(layer[u], slotOf[u])]++ > 0)
      ++v;
  return v;
}

double simpleLowerBound(const std::vector<double> &cost, int slots) {
  double total = 0, largest = 0;
  for (double c : cost) {
    total += c;
    largest = std::max(largest, c);
  }
  return slots > 0 ? std::max(total / slots, largest) : total;
}

PartitionResult partitionUnits(const PartitionProblem &pb, const PartitionOptions &opt) {
  const int n = static_cast<int>(pb.cost.size());
  const int S = std::max(1, pb.slots);
  PartitionResult res;
  res.slotOf.assign(n, -1);
  res.load.assign(S, 0.0);

  // A total order on units: cost descending, then name, then layer.
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (pb.cost[a] != pb.cost[b])
      return pb.cost[a] > pb.cost[b];
    if (pb.name[a] != pb.name[b])
      return pb.name[a] < pb.name[b];
    return pb.layer[a] < pb.layer[b];
  });
  std::vector<int> rankOf(n);
  for (int i = 0; i < n; ++i)
    rankOf[order[i]] = i;

  // Global LPT: largest unit first onto the least-loaded slot its layer does
  // not use yet; the least-loaded slot overall once the layer uses them all.
  std::set<std::pair<double, int>> bySlot;
  for (int s = 0; s < S; ++s)
    bySlot.insert({0.0, s});
  LayerSlotCounts counts;
  std::unordered_map<int, int> slotsUsedByLayer;
  for (int u : order) {
    const int layer = pb.layer[u];
    int chosen = bySlot.begin()->second;
    if (slotsUsedByLayer[layer] < S) {
      for (const auto &[load, s] : bySlot)
        if (counts.get(layer, s) == 0) {
          chosen = s;
          break;
        }
    }
    if (counts.get(layer, chosen) == 0)
      ++slotsUsedByLayer[layer];
    counts.add(layer, chosen, 1);
    bySlot.erase({res.load[chosen], chosen});
    res.load[chosen] += pb.cost[u];
    bySlot.insert({res.load[chosen], chosen});
    res.slotOf[u] = chosen;
  }
  res.lptMaxLoad = *std::max_element(res.load.begin(), res.load.end());
  res.lptLayerViolations = countLayerViolations(pb.layer, res.slotOf);
  int violations = res.lptLayerViolations;

  // Refinement: moves and swaps out of the most-loaded slot that lower the
  // larger of the two loads involved; never more layer violations than LPT.
  std::vector<std::vector<int>> unitsOn(S);
  for (int u : order)
    unitsOn[res.slotOf[u]].push_back(u);
  for (int step = 0; opt.refine && step < opt.maxRefinementSteps; ++step) {
    const int M = static_cast<int>(std::max_element(res.load.begin(), res.load.end()) -
                                   res.load.begin());
    const double Lm = res.load[M];
    double best = Lm;
    int bestU = -1, bestV = -1, bestJ = -1, bestDV = 0;
    auto consider = [&](double pairMax, int u, int v, int j, int dv) {
      if (violations + dv > res.lptLayerViolations || pairMax >= best)
        return;
      best = pairMax;
      bestU = u;
      bestV = v;
      bestJ = j;
      bestDV = dv;
    };
    for (int u : unitsOn[M]) {
      const double cu = pb.cost[u];
      for (int j = 0; j < S; ++j) {
        if (j == M)
          continue;
        if (res.load[j] + cu < Lm)
          consider(std::max(Lm - cu, res.load[j] + cu), u, -1, j,
                   moveDelta(counts, pb.layer[u], M, j));
        for (int v : unitsOn[j]) {
          const double d = cu - pb.cost[v];
          if (d <= 0 || res.load[j] + d >= Lm)
            continue;
          int dv = 0;
          if (pb.layer[u] != pb.layer[v])
            dv = moveDelta(counts, pb.layer[u], M, j) + moveDelta(counts, pb.layer[v], j, M);
          consider(std::max(Lm - d, res.load[j] + d), u, v, j, dv);
        }
      }
    }
    if (bestU < 0)
      break;
    auto relocate = [&](int u, int from, int to) {
      auto &src = unitsOn[from];
      src.erase(std::find(src.begin(), src.end(), u));
      auto &dst = unitsOn[to];
      dst.insert(std::lower_bound(dst.begin(), dst.end(), u,
                                  [&](int a, int b) { return rankOf[a] < rankOf[b]; }),
                 u);
      counts.add(pb.layer[u], from, -1);
      counts.add(pb.layer[u], to, 1);
      res.load[from] -= pb.cost[u];
      res.load[to] += pb.cost[u];
      res.slotOf[u] = to;
    };
    relocate(bestU, M, bestJ);
    if (bestV >= 0)
      relocate(bestV, bestJ, M);
    violations += bestDV;
    ++res.refinementMoves;
  }
  res.maxLoad = *std::max_element(res.load.begin(), res.load.end());
  res.layerViolations = countLayerViolations(pb.layer, res.slotOf);
  return res;
}

} // namespace dmuon
