// What the partitioner's starts share (passes/Partitioner.cpp,
// passes/PatternPacking.cpp): the total order on units and the per-(layer,
// slot) unit counts of the same-layer rule.
#ifndef DMUON_COMPILER_PASSES_PARTITIONERDETAIL_H
#define DMUON_COMPILER_PASSES_PARTITIONERDETAIL_H

#include "passes/Partitioner.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <unordered_map>
#include <vector>

namespace dmuon::partition {

inline uint64_t layerSlotKey(int layer, int slot) {
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

// A total order on units: cost descending, then name, then layer.
inline std::vector<int> unitOrder(const PartitionProblem &pb) {
  std::vector<int> order(pb.cost.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (pb.cost[a] != pb.cost[b])
      return pb.cost[a] > pb.cost[b];
    if (pb.name[a] != pb.name[b])
      return pb.name[a] < pb.name[b];
    return pb.layer[a] < pb.layer[b];
  });
  return order;
}

} // namespace dmuon::partition

#endif
