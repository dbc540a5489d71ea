// The first of n items to carry each string key, in one flat open-addressing
// table of 2n to 4n slots: the verifier's duplicate-name check (param index
// by name) and the partition's layer ids (dense id by layer). Each slot holds
// the key's hash tag beside a 32-bit value, so a probe reads a key (a name in
// a plan of hundreds of MB, a layer in a 384-byte Param) only when the tags
// match. Past a few hundred thousand items the table outgrows the caches;
// callers that know their keys a few items ahead prefetch the slots they
// will probe. Iteration order is never exposed, so nothing depends on the
// hash.
#ifndef DMUON_COMMON_FIRSTSEENTABLE_H
#define DMUON_COMMON_FIRSTSEENTABLE_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace dmuon::common {

class FirstSeenTable {
public:
  // Room for `n` distinct keys.
  explicit FirstSeenTable(size_t n) {
    size_t size = 16;
    while (size < 2 * n)
      size *= 2;
    slots_.assign(size, kEmpty);
  }

  static uint64_t hashOf(std::string_view key) { return std::hash<std::string_view>()(key); }

  void prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[hash & (slots_.size() - 1)]); }

  // The value stored with a key equal to the one hashed to `hash`
  // (`sameKey(v)`: whether stored value v's key is that key); if none,
  // `value` is stored and returned. Values must stay below 2^32 - 1.
  template <class SameKey>
  uint32_t insert(uint64_t hash, uint32_t value, SameKey &&sameKey) {
    const size_t mask = slots_.size() - 1;
    const uint64_t tag = hash & kTagMask;
    for (size_t at = hash & mask;; at = (at + 1) & mask) {
      if (slots_[at] == kEmpty) {
        slots_[at] = tag | value;
        return value;
      }
      const auto other = static_cast<uint32_t>(slots_[at]);
      if ((slots_[at] & kTagMask) == tag && sameKey(other))
        return other;
    }
  }

private:
  static constexpr uint64_t kTagMask = ~uint64_t{0xffffffff};
  static constexpr uint64_t kEmpty = ~uint64_t{0}; // value 2^32 - 1, never stored
  std::vector<uint64_t> slots_;
};

} // namespace dmuon::common

#endif
