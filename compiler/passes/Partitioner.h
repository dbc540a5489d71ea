// The balancing core of the partition pass, kept free of the PlanModel so it
// can be tested on random instances: global LPT over S slots with the
// same-layer rule, then a bounded refinement.
#ifndef DMUON_COMPILER_PASSES_PARTITIONER_H
#define DMUON_COMPILER_PASSES_PARTITIONER_H

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace dmuon {

struct PartitionProblem {
  std::vector<double> cost;       // per unit
  std::vector<int> layer;         // per unit; units of one layer prefer distinct slots
  std::vector<std::string> name;  // per unit; the tie-break after cost
  int slots = 1;
  // Per slot, the load already on it before these units (empty: none):
  // units placed by an earlier, coarser problem (see runPartition).
  std::vector<double> initialLoad;
};

struct PartitionResult {
  std::vector<int> slotOf;        // per unit
  std::vector<double> load;       // per slot
  double lptMaxLoad = 0;          // before refinement
  double maxLoad = 0;
  int refinementMoves = 0;
  int lptLayerViolations = 0;
  int layerViolations = 0;
};

struct PartitionOptions {
  bool refine = true;
  int maxRefinementSteps = 256;
  // The same-layer rule: strict (the default) sends a unit to a slot its
  // layer does not use yet whenever one exists. With a target > 0 it is a
  // preference: such a slot is taken only if it stays within `layerTarget`
  // after the unit; otherwise the least-loaded slot wins. (A 385-unit MoE
  // layer on 256 slots must otherwise put one unit on every slot, however
  // loaded.)
  double layerTarget = 0;
  // A proven lower bound on the optimum (0: unknown). The pattern start
  // below is skipped once the maximum meets it, and bisects from it.
  double lowerBound = 0;
  // In the preference mode (layerTarget > 0), a third start: patternPartition
  // below, then the same refinement; kept only if its maximum is lower.
  bool patterns = true;
};

// Deterministic: the result depends on the units' (cost, name, layer), never
// on their input order.
PartitionResult partitionUnits(const PartitionProblem &problem,
                               const PartitionOptions &options = {});

// Packing by slot patterns, for instances whose units come in few distinct
// costs (one unit per param of a model built from a handful of matrix
// shapes). It ignores the layer rule except to choose among units of equal
// cost, so partitionUnits only uses it when the rule is a preference.
//  * exact: when the count vectors of the distinct costs number at most
//    kPatternMaxStates, a dynamic program over them decides "fits in S slots
//    of capacity C" exactly; a binary search over the pattern sums C gives
//    an optimal assignment.
//  * filler: otherwise, when one cost (the filler) has at least S units, the
//    units costlier than it are grouped per cost into bundles (j units of
//    one cost share a slot) by a dynamic program that maximises the fillers
//    the slots can still hold under C; the fillers are then water-filled and
//    the cheaper units placed LPT. A bisection on C keeps the best result.
// Returns an assignment with maximum below `upperBound` (+inf: any), or an
// empty slotOf when it finds none or does not apply. Deterministic; the work
// is bounded (exact: kPatternMaxWork per capacity tried; filler:
// O(n log S + sum over costs of count * bundle size) per capacity).
struct PatternResult {
  std::vector<int> slotOf;   // per unit; empty: nothing found
  double maxLoad = 0;
  bool exact = false;        // the exact program ran: maxLoad is optimal
};
constexpr long kPatternMaxStates = 1L << 15;
constexpr long kPatternMaxWork = 2'000'000;
PatternResult patternPartition(const PartitionProblem &problem, double lowerBound = 0,
                               double upperBound = std::numeric_limits<double>::infinity());

// Units placed on a slot that already holds a unit of the same layer.
int countLayerViolations(const std::vector<int> &layer, const std::vector<int> &slotOf);

// max(total / S, largest unit): no assignment can do better.
double simpleLowerBound(const std::vector<double> &cost, int slots);

} // namespace dmuon

#endif
