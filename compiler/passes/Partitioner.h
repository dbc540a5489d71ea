// The balancing core of the partition pass, kept free of the PlanModel so it
// can be tested on random instances: global LPT over S slots with the
// same-layer rule, then a bounded refinement.
#ifndef DMUON_COMPILER_PASSES_PARTITIONER_H
#define DMUON_COMPILER_PASSES_PARTITIONER_H

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon {

struct PartitionProblem {
  std::vector<double> cost;       // per unit
  std::vector<int> layer;         // per unit; units of one layer prefer distinct slots
  std::vector<std::string> name;  // per unit; the tie-break after cost
  int slots = 1;
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
};

// Deterministic: the result depends on the units' (cost, name, layer), never
// on their input order.
PartitionResult partitionUnits(const PartitionProblem &problem,
                               const PartitionOptions &options = {});

// Units placed on a slot that already holds a unit of the same layer.
int countLayerViolations(const std::vector<int> &layer, const std::vector<int> &slotOf);

// max(total / S, largest unit): no assignment can do better.
double simpleLowerBound(const std::vector<double> &cost, int slots);

} // namespace dmuon

#endif
