// The partition's load per fine slot (docs/plan-format.md, "Rank runs"):
// from format 1.6 runs of consecutive fine slots with equal load
// (Stats.slot_load_run_lengths / slot_load_run_values), before that one
// entry per fine slot (Stats.slot_load). Readers walk runs, or look a slot
// up in O(log runs); trusted only after the verifier has checked the runs.
#ifndef DMUON_COMMON_SLOTLOADS_H
#define DMUON_COMMON_SLOTLOADS_H

#include "dmuon/plan_generated.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dmuon::common {

class SlotLoads {
public:
  struct Run {
    int64_t first, end; // fine slots [first, end)
    double load;
  };

  explicit SlotLoads(const plan::Stats *s) {
    if (!s)
      return;
    if (s->slot_load_run_lengths() && s->slot_load_run_values()) {
      const auto *len = s->slot_load_run_lengths();
      const auto *val = s->slot_load_run_values();
      const uint32_t n = std::min(len->size(), val->size());
      int64_t at = 0;
      for (uint32_t i = 0; i < n; ++i) {
        runs_.push_back({at, at + len->Get(i), val->Get(i)});
        at += len->Get(i);
      }
    } else if (const auto *v = s->slot_load()) {
      // One entry per slot: one run each (equal neighbours are not merged,
      // so a listing of an old plan is as it was).
      for (uint32_t i = 0; i < v->size(); ++i)
        runs_.push_back({i, int64_t(i) + 1, v->Get(i)});
    }
  }

  const std::vector<Run> &runs() const { return runs_; }
  // How many fine slots the loads cover.
  int64_t size() const { return runs_.empty() ? 0 : runs_.back().end; }
  // The load of fine slot `i` (0 outside the runs).
  double at(int64_t i) const {
    auto it = std::upper_bound(runs_.begin(), runs_.end(), i,
                               [](int64_t x, const Run &r) { return x < r.end; });
    return it != runs_.end() && it->first <= i ? it->load : 0.0;
  }

private:
  std::vector<Run> runs_;
};

} // namespace dmuon::common

#endif
