#include "passes/Partitioner.h"

#include <algorithm>
#include <numeric>
#include <queue>
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


// Refinement: moves and swaps out of the most-loaded slot that lower the
// larger of the two loads involved; never more than `maxViolations` layer
// violations.
void refine(const PartitionProblem &pb, const PartitionOptions &opt,
            const std::vector<int> &rankOf, const std::vector<int> &order,
            std::vector<int> &slotOf, std::vector<double> &load, LayerSlotCounts &counts,
            int maxViolations, int &moves) {
  const int S = static_cast<int>(load.size());
  int violations = countLayerViolations(pb.layer, slotOf);
  std::vector<std::vector<int>> unitsOn(S);
  for (int u : order)
    unitsOn[slotOf[u]].push_back(u);
  for (int step = 0; opt.refine && step < opt.maxRefinementSteps; ++step) {
    const int M = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
    const double Lm = load[M];
    double best = Lm;
    int bestU = -1, bestV = -1, bestJ = -1, bestDV = 0;
    auto consider = [&](double pairMax, int u, int v, int j, int dv) {
      if (violations + dv > maxViolations || pairMax >= best)
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
        if (load[j] + cu < Lm)
          consider(std::max(Lm - cu, load[j] + cu), u, -1, j,
                   moveDelta(counts, pb.layer[u], M, j));
        for (int v : unitsOn[j]) {
          const double d = cu - pb.cost[v];
          if (d <= 0 || load[j] + d >= Lm)
            continue;
          int dv = 0;
          if (pb.layer[u] != pb.layer[v])
            dv = moveDelta(counts, pb.layer[u], M, j) + moveDelta(counts, pb.layer[v], j, M);
          consider(std::max(Lm - d, load[j] + d), u, v, j, dv);
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
      load[from] -= pb.cost[u];
      load[to] += pb.cost[u];
      slotOf[u] = to;
    };
    relocate(bestU, M, bestJ);
    if (bestV >= 0)
      relocate(bestV, bestJ, M);
    violations += bestDV;
    ++moves;
  }
}

// Karmarkar–Karp's largest differencing method for S slots: every unit starts
// as a partial solution with its cost in one slot; the two partial solutions
// with the largest spread (max - min) are merged, the heaviest slot of one
// with the lightest of the other. Deterministic: ties by creation order.
std::vector<int> differencing(const PartitionProblem &pb, const std::vector<int> &order,
                              int S) {
  struct Partial {
    std::vector<double> load;           // S entries, descending
    std::vector<std::vector<int>> units; // per entry
  };
  std::vector<Partial> parts;
  parts.reserve(2 * order.size());
  using Key = std::pair<double, int>; // (spread, -id): largest spread, oldest first
  std::priority_queue<Key> heap;
  for (int u : order) {
    Partial p;
    p.load.assign(S, 0.0);
    p.units.assign(S, {});
    p.load[0] = pb.cost[u];
    p.units[0].push_back(u);
    parts.push_back(std::move(p));
    heap.push({pb.cost[u], -static_cast<int>(parts.size() - 1)});
  }
  while (heap.size() > 1) {
    int a = -heap.top().second;
    heap.pop();
    int b = -heap.top().second;
    heap.pop();
    Partial m;
    m.load.resize(S);
    m.units.resize(S);
    for (int i = 0; i < S; ++i) {
      m.load[i] = parts[a].load[i] + parts[b].load[S - 1 - i];
      m.units[i] = std::move(parts[a].units[i]);
      auto &ub = parts[b].units[S - 1 - i];
      m.units[i].insert(m.units[i].end(), ub.begin(), ub.end());
    }
    parts[a] = Partial();
    parts[b] = Partial();
    std::vector<int> idx(S);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int x, int y) { return m.load[x] > m.load[y]; });
    Partial sorted;
    sorted.load.resize(S);
    sorted.units.resize(S);
    for (int i = 0; i < S; ++i) {
      sorted.load[i] = m.load[idx[i]];
      sorted.units[i] = std::move(m.units[idx[i]]);
    }
    double spread = sorted.load.front() - sorted.load.back();
    parts.push_back(std::move(sorted));
    heap.push({spread, -static_cast<int>(parts.size() - 1)});
  }
  // Slot i of the result takes entry i (heaviest first).
  std::vector<int> slotOf(pb.cost.size(), 0);
  if (!heap.empty()) {
    const Partial &f = parts[-heap.top().second];
    for (int i = 0; i < S; ++i)
      for (int u : f.units[i])
        slotOf[u] = i;
  }
  return slotOf;
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
      for (const auto &[load, s] : bySlot) {
        if (opt.layerTarget > 0 && load + pb.cost[u] > opt.layerTarget)
          break;
        if (counts.get(layer, s) == 0) {
          chosen = s;
          break;
        }
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

  refine(pb, opt, rankOf, order, res.slotOf, res.load, counts, res.lptLayerViolations,
         res.refinementMoves);

  // A second start for the few-large-units regime (Llama at 64 slots):
  // Karmarkar–Karp differencing, then the same refinement; kept only if its
  // maximum is lower. It ignores the layer rule, so only when that rule is a
  // preference, and only while n * S is small (it costs O(n S log n)).
  if (opt.layerTarget > 0 && static_cast<int64_t>(n) * S <= 4'000'000 && n > S) {
    std::vector<int> kkSlot = differencing(pb, order, S);
    std::vector<double> kkLoad(S, 0.0);
    LayerSlotCounts kkCounts;
    for (int u = 0; u < n; ++u) {
      kkLoad[kkSlot[u]] += pb.cost[u];
      kkCounts.add(pb.layer[u], kkSlot[u], 1);
    }
    int kkMoves = 0;
    refine(pb, opt, rankOf, order, kkSlot, kkLoad, kkCounts,
           countLayerViolations(pb.layer, kkSlot), kkMoves);
    if (*std::max_element(kkLoad.begin(), kkLoad.end()) <
        *std::max_element(res.load.begin(), res.load.end())) {
      res.slotOf = std::move(kkSlot);
      res.load = std::move(kkLoad);
      res.refinementMoves += kkMoves;
    }
  }
  res.maxLoad = *std::max_element(res.load.begin(), res.load.end());
  res.layerViolations = countLayerViolations(pb.layer, res.slotOf);
  return res;
}

} // namespace dmuon
