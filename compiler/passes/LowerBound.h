// Lower bounds on the optimal maximum slot load of the per-parameter
// partition problem (P||Cmax): no assignment of the items to S slots can do
// better. Used to report how far a partition is from optimal.
#ifndef DMUON_COMPILER_PASSES_LOWERBOUND_H
#define DMUON_COMPILER_PASSES_LOWERBOUND_H

#include <string>
#include <vector>

namespace dmuon {

struct LowerBound {
  double value = 0;
  // Which argument gave `value`: "average" (total / S), "largest" (largest
  // item), "pair" (c_S + c_{S+1}, items sorted descending), "mt_l2"
  // (Martello–Toth L2 under bisection on the capacity) or "dff" (Fekete–
  // Schepers dual feasible functions under bisection) or "knapsack" (no
  // slot's share of the few largest sizes can fill it, under bisection).
  std::string kind = "average";
  double simple = 0; // max(total / S, largest item)
};

// Every bound holds for any assignment of `cost` (each item indivisible) to
// `slots` slots. Cost O(n log n + d^2 log(range)) for d distinct item sizes
// (d is a few dozen on real models; bounded work otherwise).
LowerBound strongLowerBound(const std::vector<double> &cost, int slots);
// The same with item i present copies[i] times (a whole number each).
LowerBound strongLowerBound(const std::vector<double> &cost, const std::vector<double> &copies,
                            int slots);

} // namespace dmuon

#endif
