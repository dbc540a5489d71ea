// What the partitioner's starts share (passes/Partitioner.cpp,
// passes/PatternPacking.cpp): the total order on units and the per-(layer,
// slot) unit counts of the same-layer rule.
#ifndef DMUON_COMPILER_PASSES_PARTITIONERDETAIL_H
#define DMUON_COMPILER_PASSES_PARTITIONERDETAIL_H

#include "passes/Partitioner.h"

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

// Counts per 64-bit key in one open-addressed table (linear probing, the
// capacity a power of two at most half full). The partition keeps one entry
// per (layer, slot) in use, a million at 1M params; std::unordered_map's
// node per entry and pointer chase per lookup were a third of the
// partition's time there. Never iterated, so the layout decides nothing.
class FlatCounts {
public:
  explicit FlatCounts(size_t expected = 0) { rehash(capacityFor(expected)); }
  int get(uint64_t key) const {
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Entry &e = table_[i];
      if (!e.used)
        return 0;
      if (e.key == key)
        return e.count;
    }
  }
  // The count of `key`, inserted as 0 when absent.
  int &at(uint64_t key) {
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      Entry &e = table_[i];
      if (e.used && e.key == key)
        return e.count;
      if (!e.used) {
        if (2 * (used_ + 1) > table_.size()) {
          rehash(2 * table_.size());
          return at(key);
        }
        ++used_;
        e = {key, 0, true};
        return e.count;
      }
    }
  }

private:
  struct Entry {
    uint64_t key = 0;
    int count = 0;
    bool used = false;
  };
  static size_t capacityFor(size_t n) {
    size_t c = 16;
    while (c < 2 * n)
      c *= 2;
    return c;
  }
  // splitmix64's finaliser: (layer, slot) keys differ in both halves.
  static size_t mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<size_t>(x ^ (x >> 31));
  }
  void rehash(size_t capacity) {
    std::vector<Entry> old = std::move(table_);
    table_.assign(capacity, Entry{});
    mask_ = capacity - 1;
    used_ = 0;
    for (const Entry &e : old)
      if (e.used)
        at(e.key) = e.count;
  }
  std::vector<Entry> table_;
  size_t mask_ = 0;
  size_t used_ = 0;
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
