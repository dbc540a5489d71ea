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
#include <string>
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
// (layer, slot) in use, a million at 1M params, where std::unordered_map
// would allocate a node per entry and chase a pointer per lookup. Never
// iterated, so the table's layout decides nothing.
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
// violations of the same-layer rule. Only layers of two or more units are
// counted: a layer's only unit can never share a slot with another, so its
// count reads 0, on every slot, and takes no table entry (a model of 1M
// one-unit layers otherwise kept a million entries in a table far larger
// than the caches). Callers ask about a unit's own slot only as "another
// unit of the layer is there too" (>= 2), which 0 answers as 1 would.
class LayerSlotCounts {
public:
  // `unitLayer`: each unit's layer, as PartitionProblem::layer.
  explicit LayerSlotCounts(const std::vector<int> &unitLayer) {
    size_t counted = 0;
    for (int l : unitLayer)
      if (l >= 0) {
        if (static_cast<size_t>(l) >= unitsOfLayer_.size())
          unitsOfLayer_.resize(static_cast<size_t>(l) + 1, 0);
        if (unitsOfLayer_[static_cast<size_t>(l)] < 2)
          ++unitsOfLayer_[static_cast<size_t>(l)];
      }
    for (int l : unitLayer)
      counted += isCounted(l) ? 1 : 0;
    counts_ = FlatCounts(counted);
  }
  int get(int layer, int slot) const {
    return isCounted(layer) ? counts_.get(layerSlotKey(layer, slot)) : 0;
  }
  // Returns the new count (0 for a layer not counted).
  int add(int layer, int slot, int delta) {
    return isCounted(layer) ? counts_.at(layerSlotKey(layer, slot)) += delta : 0;
  }
  // Whether the layer has two or more units (or is not among unitLayer's).
  bool isCounted(int layer) const {
    return layer < 0 || static_cast<size_t>(layer) >= unitsOfLayer_.size() ||
           unitsOfLayer_[static_cast<size_t>(layer)] >= 2;
  }

private:
  std::vector<uint8_t> unitsOfLayer_; // 0, 1, or 2 for "two or more"
  FlatCounts counts_;
};

// The 8 bytes of `s` from `at` as a big-endian integer, zero past its end:
// such integers compare as the bytes do.
inline uint64_t bigEndianBytes(const std::string &s, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i)
    v = (v << 8) | (at + i < s.size() ? static_cast<unsigned char>(s[at + i]) : 0u);
  return v;
}

// A total order on units: cost descending, then name, then layer. Each
// unit's first 16 name bytes sit in its sort key: two keys whose prefixes
// differ order as their names do (where a zero pad meets a byte, the padded
// name is a prefix of the other, hence first), so names are read only when
// prefixes tie: a heap-held name costs a cache miss per comparison, and
// the sort makes millions of them at a million units.
inline std::vector<int> unitOrder(const PartitionProblem &pb) {
  struct Key {
    double cost;
    uint64_t head, next; // name bytes 0-7 and 8-15
    int layer, unit;
  };
  std::vector<Key> keys(pb.cost.size());
  for (size_t u = 0; u < keys.size(); ++u)
    keys[u] = {pb.cost[u], bigEndianBytes(pb.name[u], 0), bigEndianBytes(pb.name[u], 8),
               pb.layer[u], static_cast<int>(u)};
  std::sort(keys.begin(), keys.end(), [&](const Key &a, const Key &b) {
    if (a.cost != b.cost)
      return a.cost > b.cost;
    if (a.head != b.head)
      return a.head < b.head;
    if (a.next != b.next)
      return a.next < b.next;
    if (const int c = pb.name[a.unit].compare(pb.name[b.unit]); c != 0)
      return c < 0;
    return a.layer < b.layer;
  });
  std::vector<int> order(keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    order[i] = keys[i].unit;
  return order;
}

} // namespace dmuon::partition

#endif
