// What the partitioner's starts share (passes/Partitioner.cpp,
// passes/PatternPacking.cpp): the total order on units and the per-(layer,
// slot) unit counts of the same-layer rule.
#ifndef DMUON_COMPILER_PASSES_PARTITIONERDETAIL_H
#define DMUON_COMPILER_PASSES_PARTITIONERDETAIL_H

#include "passes/Partitioner.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace dmuon::partition {

inline uint64_t layerSlotKey(int layer, int slot) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) |
         static_cast<uint32_t>(slot);
}

// llvm::DenseMap's key traits for the partition's 64-bit keys (layer or
// (layer, slot), layerSlotKey): its own hash of a uint64_t keeps only the low
// 32 bits of key * 37, so every (layer, slot) of one slot would collide; this
// mixes both halves (splitmix64's finaliser). The two reserved keys are
// (layer -1, slot -1) and (layer -1, slot -2), which no slot index reaches.
struct PartitionKeyInfo {
  static uint64_t getEmptyKey() { return ~uint64_t(0); }
  static uint64_t getTombstoneKey() { return ~uint64_t(0) - 1; }
  static unsigned getHashValue(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<unsigned>(x ^ (x >> 31));
  }
  static bool isEqual(uint64_t a, uint64_t b) { return a == b; }
};

// Counts per 64-bit key in one flat table: the partition keeps one entry per
// (layer, slot) in use, a million at 1M params, where std::unordered_map's
// node per entry and pointer chase per lookup were a third of the
// partition's time. Never iterated, so the table's layout decides nothing.
class FlatCounts {
public:
  explicit FlatCounts(size_t expected = 0) { counts_.reserve(static_cast<unsigned>(expected)); }
  int get(uint64_t key) const { return counts_.lookup(key); }
  // The count of `key`, inserted as 0 when absent.
  int &at(uint64_t key) { return counts_[key]; }

private:
  llvm::DenseMap<uint64_t, int, PartitionKeyInfo> counts_;
};

// Counts of units per (layer, slot); a layer's k units on one slot are k-1
// violations of the same-layer rule.
class LayerSlotCounts {
public:
  explicit LayerSlotCounts(size_t expected = 0) : counts_(expected) {}
  int get(int layer, int slot) const { return counts_.get(layerSlotKey(layer, slot)); }
  void add(int layer, int slot, int delta) { counts_.at(layerSlotKey(layer, slot)) += delta; }

private:
  FlatCounts counts_;
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
