// Pattern packing (Partitioner.h, patternPartition): the exact program over
// count vectors of the distinct costs, and the filler bundles.
#include "passes/Partitioner.h"
#include "passes/PartitionerDetail.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>

namespace dmuon {

using partition::LayerSlotCounts;
using partition::unitOrder;

namespace {

// Units of one exact cost, in the total order; classes costliest first.
struct CostClass {
  double w = 0;
  std::vector<int> units;
};

std::vector<CostClass> costClasses(const PartitionProblem &pb, const std::vector<int> &order) {
  std::vector<CostClass> out;
  for (int u : order) {
    if (pb.cost[u] <= 0)
      continue;
    if (out.empty() || out.back().w != pb.cost[u])
      out.push_back({pb.cost[u], {}});
    out.back().units.push_back(u);
  }
  return out;
}

// Turns per-slot counts of each class (quota[class][slot]) into an
// assignment, preferring slots the unit's layer does not use yet. Units of
// cost 0 go round-robin. O(n S).
std::vector<int> assignByQuota(const PartitionProblem &pb, const std::vector<int> &order,
                               const std::vector<CostClass> &cls,
                               std::vector<std::vector<int>> quota, int S) {
  std::vector<int> slotOf(pb.cost.size(), 0);
  LayerSlotCounts counts(pb.layer);
  for (size_t k = 0; k < cls.size(); ++k) {
    std::vector<int> open;
    for (int s = 0; s < S; ++s)
      if (quota[k][s] > 0)
        open.push_back(s);
    for (int u : cls[k].units) {
      // Most quota left among the slots free of the unit's layer (spreads a
      // layer's units), else most quota left; ties by slot index.
      size_t pick = 0;
      bool pickFree = false;
      for (size_t i = 0; i < open.size(); ++i) {
        const bool free = counts.get(pb.layer[u], open[i]) == 0;
        if ((free && !pickFree) ||
            (free == pickFree && quota[k][open[i]] > quota[k][open[pick]])) {
          pick = i;
          pickFree = free;
        }
      }
      const int s = open[pick];
      slotOf[u] = s;
      counts.add(pb.layer[u], s, 1);
      if (--quota[k][s] == 0)
        open.erase(open.begin() + static_cast<long>(pick));
    }
  }
  int next = 0;
  for (int u : order)
    if (pb.cost[u] <= 0)
      slotOf[u] = next++ % S;
  return slotOf;
}

// The exact program (see patternPartition). Returns false when it does not
// apply (too many states or too much work).
bool exactPatterns(const PartitionProblem &pb, const std::vector<int> &order,
                   const std::vector<CostClass> &cls, int S, double lo, double hi,
                   PatternResult &out) {
  const int d = static_cast<int>(cls.size());
  if (!(hi < std::numeric_limits<double>::infinity())) {
    // List scheduling's bound: the optimum is at most total / S + largest.
    double total = 0;
    for (const CostClass &k : cls)
      total += k.w * static_cast<double>(k.units.size());
    hi = std::nextafter(total / S + cls.front().w, std::numeric_limits<double>::infinity());
  }
  std::vector<long> stride(d);
  long states = 1;
  for (int i = d - 1; i >= 0; --i) {
    stride[i] = states;
    states *= static_cast<long>(cls[i].units.size()) + 1;
    if (states > kPatternMaxStates)
      return false;
  }
  // Patterns: count vectors c <= n, c != 0, whose sum is below hi.
  struct Pattern {
    double sum;
    long offset;
    int first; // first class with c_i > 0
  };
  std::vector<Pattern> pats;
  std::vector<int> digits; // d per pattern
  std::vector<int> c(d, 0);
  bool tooMany = false;
  auto enumerate = [&](auto &&self, int i, double sum, long offset, int first) -> void {
    if (tooMany)
      return;
    if (i == d) {
      if (first < d) {
        pats.push_back({sum, offset, first});
        digits.insert(digits.end(), c.begin(), c.end());
        if (static_cast<long>(pats.size()) * states > kPatternMaxWork)
          tooMany = true;
      }
      return;
    }
    const int n = static_cast<int>(cls[i].units.size());
    for (int k = 0; k <= n; ++k) {
      const double next = sum + k * cls[i].w;
      if (k > 0 && !(next < hi))
        break;
      c[i] = k;
      self(self, i + 1, next, offset + k * stride[i], k > 0 && first == d ? i : first);
    }
    c[i] = 0;
  };
  enumerate(enumerate, 0, 0.0, 0, d);
  if (tooMany)
    return false;
  out.exact = true;
  // Patterns by first class, cheapest first; candidate capacities: the sums.
  std::vector<std::vector<int>> byFirst(d);
  std::vector<int> idx(pats.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return pats[a].sum < pats[b].sum; });
  std::vector<double> cand;
  for (int p : idx) {
    byFirst[pats[p].first].push_back(p);
    if (pats[p].sum >= lo * (1 - 1e-9) && (cand.empty() || cand.back() != pats[p].sum))
      cand.push_back(pats[p].sum);
  }
  if (cand.empty())
    return true;
  // f[v]: fewest slots of capacity C that hold the count vector v.
  constexpr int kInf = 1 << 29;
  std::vector<int> f(states), choice(states);
  auto feasible = [&](double C) {
    f[0] = 0;
    std::vector<int> v(d, 0);
    for (long id = 1; id < states; ++id) {
      for (int i = d - 1; i >= 0; --i) { // mixed-radix increment
        if (v[i] < static_cast<int>(cls[i].units.size())) {
          ++v[i];
          break;
        }
        v[i] = 0;
      }
      int first = 0;
      while (v[first] == 0)
        ++first;
      int best = kInf, bestP = -1;
      for (int p : byFirst[first]) {
        if (pats[p].sum > C)
          break;
        const int *cp = &digits[static_cast<size_t>(p) * d];
        bool fits = true;
        for (int j = first; j < d && fits; ++j)
          fits = cp[j] <= v[j];
        if (!fits)
          continue;
        const int val = f[id - pats[p].offset];
        if (val + 1 < best) {
          best = val + 1;
          bestP = p;
        }
      }
      f[id] = best;
      choice[id] = bestP;
    }
    return f[states - 1] <= S;
  };
  // Smallest feasible candidate (feasibility is monotone in C).
  if (!feasible(cand.back()))
    return true; // nothing below hi
  size_t a = 0, b = cand.size() - 1;
  while (a < b) {
    size_t mid = a + (b - a) / 2;
    if (feasible(cand[mid]))
      b = mid;
    else
      a = mid + 1;
  }
  feasible(cand[a]);
  std::vector<std::vector<int>> quota(d, std::vector<int>(S, 0));
  int slot = 0;
  for (long id = states - 1; id > 0; id -= pats[choice[id]].offset, ++slot) {
    const int *cp = &digits[static_cast<size_t>(choice[id]) * d];
    for (int j = 0; j < d; ++j)
      quota[j][slot] = cp[j];
  }
  out.slotOf = assignByQuota(pb, order, cls, std::move(quota), S);
  return true;
}

// The filler heuristic (see patternPartition). Returns false when it does
// not apply.
bool fillerPatterns(const PartitionProblem &pb, const std::vector<int> &order,
                    const std::vector<CostClass> &cls, int S, double lo, double hi,
                    PatternResult &out) {
  const int d = static_cast<int>(cls.size());
  int fc = 0;
  for (int i = 1; i < d; ++i)
    if (cls[i].units.size() > cls[fc].units.size())
      fc = i;
  const double wf = cls[fc].w;
  const long nf = static_cast<long>(cls[fc].units.size());
  if (nf < S)
    return false;
  double bestMax = hi;
  std::vector<std::vector<int>> bestQuota;
  std::vector<std::vector<int>> quota(d, std::vector<int>(S, 0));
  std::vector<double> gLoss;
  std::vector<int> gSlots, gChoice;
  // Bundles for capacity C; false if they leave too little room for fillers.
  auto tryCapacity = [&](double C) {
    const double P = std::floor(C / wf);
    if (P < 1)
      return false;
    for (auto &q : quota)
      std::fill(q.begin(), q.end(), 0);
    std::vector<double> load(S, 0.0);
    double loss = 0;
    int slot = 0;
    for (int i = 0; i < fc; ++i) {
      const int n = static_cast<int>(cls[i].units.size());
      const int J = static_cast<int>(std::min<double>(n, std::floor(C / cls[i].w)));
      if (J < 1)
        return false;
      // g[m]: least filler room lost (then fewest slots) holding m units of
      // this cost in bundles of j <= J units, one bundle per slot.
      gLoss.assign(n + 1, 0);
      gSlots.assign(n + 1, 0);
      gChoice.assign(n + 1, 0);
      for (int m = 1; m <= n; ++m) {
        gLoss[m] = 1e300;
        for (int j = 1; j <= std::min(J, m); ++j) {
          const double l = gLoss[m - j] + P - std::floor((C - j * cls[i].w) / wf);
          const int sl = gSlots[m - j] + 1;
          if (l < gLoss[m] || (l == gLoss[m] && sl < gSlots[m])) {
            gLoss[m] = l;
            gSlots[m] = sl;
            gChoice[m] = j;
          }
        }
      }
      loss += gLoss[n];
      if (slot + gSlots[n] > S)
        return false;
      for (int m = n; m > 0; m -= gChoice[m], ++slot) {
        quota[i][slot] = gChoice[m];
        load[slot] += gChoice[m] * cls[i].w;
      }
    }
    if (S * P - loss < static_cast<double>(nf))
      return false;
    // Fillers water-filled, then the cheaper units LPT (least-loaded slot).
    std::set<std::pair<double, int>> bySlot;
    for (int s = 0; s < S; ++s)
      bySlot.insert({load[s], s});
    auto place = [&](int k, double w) {
      auto [l, s] = *bySlot.begin();
      bySlot.erase(bySlot.begin());
      load[s] = l + w;
      ++quota[k][s];
      bySlot.insert({load[s], s});
    };
    for (long k = 0; k < nf; ++k)
      place(fc, wf);
    for (int i = fc + 1; i < d; ++i)
      for (size_t k = 0; k < cls[i].units.size(); ++k)
        place(i, cls[i].w);
    const double mx = *std::max_element(load.begin(), load.end());
    if (mx < bestMax) {
      bestMax = mx;
      bestQuota = quota;
    }
    return true;
  };
  if (!(hi < std::numeric_limits<double>::infinity())) {
    double total = 0;
    for (const CostClass &k : cls)
      total += k.w * static_cast<double>(k.units.size());
    hi = total / S + cls.front().w;
  }
  for (int it = 0; it < 40 && hi - lo > 1e-9 * hi; ++it) {
    const double mid = lo + (hi - lo) / 2;
    if (tryCapacity(mid))
      hi = mid;
    else
      lo = mid;
  }
  if (!bestQuota.empty())
    out.slotOf = assignByQuota(pb, order, cls, std::move(bestQuota), S);
  return true;
}

} // namespace

PatternResult patternPartition(const PartitionProblem &pb, double lowerBound, double upperBound) {
  PatternResult res;
  const int S = std::max(1, pb.slots);
  const std::vector<int> order = unitOrder(pb);
  const std::vector<CostClass> cls = costClasses(pb, order);
  if (cls.empty())
    return res;
  const double lo = std::max(lowerBound, simpleLowerBound(pb.cost, S));
  if (!exactPatterns(pb, order, cls, S, lo, upperBound, res))
    fillerPatterns(pb, order, cls, S, lo, upperBound, res);
  if (res.slotOf.empty())
    return res;
  std::vector<double> load(S, 0.0);
  for (size_t u = 0; u < pb.cost.size(); ++u)
    load[res.slotOf[u]] += pb.cost[u];
  res.maxLoad = *std::max_element(load.begin(), load.end());
  if (!(res.maxLoad < upperBound))
    res.slotOf.clear();
  return res;
}

} // namespace dmuon
