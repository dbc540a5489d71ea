// Properties of the global LPT partitioner on random instances.
#include "passes/LowerBound.h"
#include "passes/Partitioner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <numeric>
#include <set>

using namespace dmuon;

namespace {

PartitionProblem randomProblem(std::mt19937_64 &rng, int units, int slots, int layers) {
  PartitionProblem p;
  p.slots = slots;
  std::uniform_int_distribution<int> costDist(1, 1000);
  std::uniform_int_distribution<int> layerDist(0, std::max(0, layers - 1));
  for (int u = 0; u < units; ++u) {
    p.cost.push_back(costDist(rng));
    p.layer.push_back(layers > 0 ? layerDist(rng) : u);
    p.name.push_back("u" + std::to_string(u));
  }
  return p;
}

// Exact optimum by enumerating every assignment (small instances only).
double bruteForceOptimum(const PartitionProblem &p) {
  const int n = static_cast<int>(p.cost.size());
  std::vector<int> slot(n, 0);
  std::vector<double> load(p.slots, 0);
  double best = 1e300;
  // Depth-first with symmetry breaking: unit u may open at most one new slot.
  auto rec = [&](auto &&self, int u, int used) -> void {
    if (u == n) {
      best = std::min(best, *std::max_element(load.begin(), load.end()));
      return;
    }
    for (int s = 0; s < std::min(used + 1, p.slots); ++s) {
      load[s] += p.cost[u];
      if (load[s] < best)
        self(self, u + 1, std::max(used, s + 1));
      load[s] -= p.cost[u];
    }
  };
  rec(rec, 0, 0);
  return best;
}

double maxOf(const std::vector<double> &v) { return *std::max_element(v.begin(), v.end()); }

} // namespace

TEST(Partition, EveryUnitAssignedExactlyOnceAndLoadsAddUp) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    int slots = 1 + trial % 17;
    PartitionProblem p = randomProblem(rng, 1 + trial % 60, slots, 1 + trial % 7);
    PartitionResult r = partitionUnits(p);
    ASSERT_EQ(r.slotOf.size(), p.cost.size());
    std::vector<double> load(slots, 0);
    for (size_t u = 0; u < p.cost.size(); ++u) {
      ASSERT_GE(r.slotOf[u], 0);
      ASSERT_LT(r.slotOf[u], slots);
      load[r.slotOf[u]] += p.cost[u];
    }
    for (int s = 0; s < slots; ++s)
      EXPECT_DOUBLE_EQ(load[s], r.load[s]);
    EXPECT_DOUBLE_EQ(r.maxLoad, maxOf(load));
    EXPECT_GE(r.maxLoad, simpleLowerBound(p.cost, slots));
  }
}

TEST(Partition, DistinctLayersStayWithinGrahamBoundOfOptimum) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 300; ++trial) {
    int slots = 2 + trial % 3;
    int units = 3 + trial % 7;
    PartitionProblem p = randomProblem(rng, units, slots, /*layers=*/0);
    double opt = bruteForceOptimum(p);
    PartitionResult r = partitionUnits(p);
    double bound = (4.0 / 3.0 - 1.0 / (3.0 * slots)) * opt;
    EXPECT_LE(r.maxLoad, bound + 1e-9) << "trial " << trial;
    EXPECT_LE(r.lptMaxLoad, bound + 1e-9) << "trial " << trial;
    EXPECT_GE(r.maxLoad, opt);
  }
}

TEST(Partition, LayerRuleHoldsWheneverAFreeSlotExists) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    int slots = 2 + trial % 9;
    PartitionProblem p = randomProblem(rng, 5 + trial % 80, slots, 1 + trial % 12);
    PartitionResult r = partitionUnits(p);
    std::map<int, std::set<int>> slotsOfLayer;
    std::map<int, int> unitsOfLayer;
    for (size_t u = 0; u < p.cost.size(); ++u) {
      slotsOfLayer[p.layer[u]].insert(r.slotOf[u]);
      ++unitsOfLayer[p.layer[u]];
    }
    for (auto &[layer, k] : unitsOfLayer)
      EXPECT_EQ(static_cast<int>(slotsOfLayer[layer].size()), std::min(k, slots))
          << "trial " << trial << " layer " << layer;
    EXPECT_LE(r.layerViolations, r.lptLayerViolations);
  }
}

TEST(Partition, RefinementNeverIncreasesMaxLoad) {
  std::mt19937_64 rng(4);
  int improved = 0;
  for (int trial = 0; trial < 300; ++trial) {
    int slots = 2 + trial % 31;
    PartitionProblem p = randomProblem(rng, 10 + trial % 200, slots, trial % 20);
    PartitionResult plain = partitionUnits(p, {.refine = false});
    PartitionResult refined = partitionUnits(p);
    EXPECT_DOUBLE_EQ(plain.maxLoad, refined.lptMaxLoad);
    EXPECT_LE(refined.maxLoad, plain.maxLoad);
    if (refined.maxLoad < plain.maxLoad)
      ++improved;
  }
  // The refinement must actually do something on random instances.
  EXPECT_GT(improved, 0);
}

TEST(Partition, ShuffledInputGivesTheSameAssignment) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    int slots = 1 + trial % 13;
    PartitionProblem p = randomProblem(rng, 1 + trial % 90, slots, 1 + trial % 6);
    // Force cost ties so the name tie-break matters.
    for (size_t u = 0; u < p.cost.size(); u += 3)
      p.cost[u] = 500;
    PartitionResult r = partitionUnits(p);

    std::vector<int> perm(p.cost.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    PartitionProblem q;
    q.slots = slots;
    for (int u : perm) {
      q.cost.push_back(p.cost[u]);
      q.layer.push_back(p.layer[u]);
      q.name.push_back(p.name[u]);
    }
    PartitionResult rq = partitionUnits(q);
    for (size_t i = 0; i < perm.size(); ++i)
      ASSERT_EQ(rq.slotOf[i], r.slotOf[perm[i]]) << "trial " << trial;
  }
}

TEST(Partition, SingleSlotTakesEverything) {
  PartitionProblem p{{5, 3, 2}, {0, 0, 1}, {"a", "b", "c"}, 1};
  PartitionResult r = partitionUnits(p);
  EXPECT_EQ(r.slotOf, (std::vector<int>{0, 0, 0}));
  EXPECT_DOUBLE_EQ(r.maxLoad, 10);
}

TEST(Partition, LowerBoundIsLargestUnitOrAverage) {
  EXPECT_DOUBLE_EQ(simpleLowerBound({10, 1, 1}, 2), 10);
  EXPECT_DOUBLE_EQ(simpleLowerBound({4, 4, 4, 4}, 2), 8);
}

// The strong lower bound is a bound: never above the exact optimum, never
// below the simple one; and it is tight on identical items (ceil(n/S) each).
TEST(LowerBound, NeverExceedsTheOptimum) {
  std::mt19937_64 rng(6);
  int tighter = 0;
  for (int trial = 0; trial < 300; ++trial) {
    int slots = 2 + trial % 3;
    PartitionProblem p = randomProblem(rng, 3 + trial % 8, slots, /*layers=*/0);
    if (trial % 2) // few distinct sizes, where the bin-packing bounds bite
      for (double &c : p.cost)
        c = 100 + 37 * (static_cast<int>(c) % 3);
    double opt = bruteForceOptimum(p);
    LowerBound lb = strongLowerBound(p.cost, slots);
    EXPECT_LE(lb.value, opt * (1 + 1e-12)) << "trial " << trial << " kind " << lb.kind;
    EXPECT_GE(lb.value, simpleLowerBound(p.cost, slots) * (1 - 1e-12));
    EXPECT_DOUBLE_EQ(lb.simple, simpleLowerBound(p.cost, slots));
    if (lb.value > lb.simple * (1 + 1e-9))
      ++tighter;
  }
  EXPECT_GT(tighter, 0);
}

TEST(LowerBound, IdenticalItemsNeedCeilPerSlot) {
  std::vector<double> c(70, 3.0); // 70 items on 8 slots: some slot holds 9
  LowerBound lb = strongLowerBound(c, 8);
  EXPECT_GT(lb.value, 8 * 3.0);
  EXPECT_LE(lb.value, 9 * 3.0);
  EXPECT_GT(lb.value, 27 * (1 - 1e-9));
}
