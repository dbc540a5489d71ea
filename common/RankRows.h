// The per-rank figures of a plan, for the verifier, the runtime and the
// printers (docs/plan-format.md, "Communication accounting"): from format
// 1.6 runs of consecutive ranks with equal figures (Stats.rank_runs), before
// that one row per rank (Stats.ranks). A reader looks a rank up in
// O(log rows) and walks rows, never the world, so a plan for 2^24 ranks
// whose ranks mostly agree stays small to read and print.
//
// Rows are trusted only after the verifier has checked them (ascending
// first ranks from 0, below the world size).
#ifndef DMUON_COMMON_RANKROWS_H
#define DMUON_COMMON_RANKROWS_H

#include "dmuon/plan_generated.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon::common {

// Printed forms list one row per rank up to this many ranks, then one per
// run (the same cut as replicate group listings).
constexpr int64_t kRankListLimit = 4096;

class RankRows {
public:
  using Rows = flatbuffers::Vector<flatbuffers::Offset<plan::RankFigures>>;

  RankRows(const plan::Stats *stats, int64_t worldSize) : world_(worldSize) {
    if (!stats)
      return;
    if (stats->rank_runs()) {
      rows_ = stats->rank_runs();
      runs_ = true;
    } else {
      rows_ = stats->ranks();
    }
  }
  explicit RankRows(const plan::Plan &p)
      : RankRows(p.stats(), p.mesh() ? p.mesh()->world_size() : 0) {}

  // Whether the rows are runs (1.6) rather than one per rank.
  bool runs() const { return runs_; }
  bool present() const { return rows_ != nullptr; }
  uint32_t size() const { return rows_ ? rows_->size() : 0; }
  bool empty() const { return size() == 0; }
  const plan::RankFigures *row(uint32_t i) const { return rows_->Get(i); }
  // The ranks [first(i), end(i)) that row i holds.
  int64_t first(uint32_t i) const { return runs_ ? row(i)->rank() : i; }
  int64_t end(uint32_t i) const {
    if (!runs_)
      return int64_t(i) + 1;
    return i + 1 < size() ? int64_t(row(i + 1)->rank()) : world_;
  }
  int64_t count(uint32_t i) const { return end(i) - first(i); }

  // The row that holds `rank`, or null.
  const plan::RankFigures *ofRank(int64_t rank) const {
    if (rank < 0 || empty())
      return nullptr;
    if (!runs_)
      return rank < size() ? row(static_cast<uint32_t>(rank)) : nullptr;
    if (rank >= world_)
      return nullptr;
    uint32_t lo = 0, hi = size(); // the last row whose first rank <= rank
    while (hi - lo > 1) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (row(mid)->rank() <= rank)
        lo = mid;
      else
        hi = mid;
    }
    return row(lo)->rank() <= rank ? row(lo) : nullptr;
  }

  struct Listed {
    int64_t first, end; // the ranks [first, end)
    const plan::RankFigures *row;
    // "rank 3" or "ranks 4-4095".
    std::string label() const {
      return end - first == 1 ? "rank " + std::to_string(first)
                              : "ranks " + std::to_string(first) + "-" + std::to_string(end - 1);
    }
  };
  std::vector<Listed> listed() const {
    std::vector<Listed> out;
    forEachListed([&](int64_t f, int64_t e, const plan::RankFigures *r) {
      out.push_back({f, e, r});
    });
    return out;
  }

  // What a printed form lists: fn(firstRank, endRank, row) per rank while the
  // world has at most kRankListLimit ranks, else per row.
  template <typename Fn> void forEachListed(Fn fn) const {
    const bool perRank = world_ <= kRankListLimit;
    for (uint32_t i = 0; i < size(); ++i) {
      if (perRank)
        for (int64_t r = first(i); r < end(i); ++r)
          fn(r, r + 1, row(i));
      else
        fn(first(i), end(i), row(i));
    }
  }

private:
  const Rows *rows_ = nullptr;
  bool runs_ = false;
  int64_t world_ = 0;
};

// Whether two rows hold the same figures (their `rank` aside).
inline bool sameRankFigures(const plan::RankFigures &a, const plan::RankFigures &b) {
  return a.owned_params() == b.owned_params() && a.owned_elements() == b.owned_elements() &&
         a.master_bytes() == b.master_bytes() && a.momentum_bytes() == b.momentum_bytes() &&
         a.peak_buffer_bytes() == b.peak_buffer_bytes() && a.ns_flops() == b.ns_flops() &&
         a.broadcast_send_bytes() == b.broadcast_send_bytes() &&
         a.broadcast_recv_bytes() == b.broadcast_recv_bytes() &&
         a.reduce_send_bytes() == b.reduce_send_bytes() &&
         a.reduce_recv_bytes() == b.reduce_recv_bytes() &&
         a.replicate_send_bytes() == b.replicate_send_bytes() &&
         a.replicate_recv_bytes() == b.replicate_recv_bytes() &&
         a.allreduce_bytes() == b.allreduce_bytes() &&
         a.gather_send_bytes() == b.gather_send_bytes() &&
         a.gather_recv_bytes() == b.gather_recv_bytes() &&
         a.scatter_send_bytes() == b.scatter_send_bytes() &&
         a.scatter_recv_bytes() == b.scatter_recv_bytes() &&
         a.data_allreduce_bytes() == b.data_allreduce_bytes() &&
         a.allgather_send_bytes() == b.allgather_send_bytes() &&
         a.allgather_recv_bytes() == b.allgather_recv_bytes() &&
         a.reduce_scatter_send_bytes() == b.reduce_scatter_send_bytes() &&
         a.reduce_scatter_recv_bytes() == b.reduce_scatter_recv_bytes() &&
         a.value_bytes() == b.value_bytes() && a.adam_moment_bytes() == b.adam_moment_bytes() &&
         a.grad_bytes() == b.grad_bytes() && a.memory_bytes() == b.memory_bytes();
}

} // namespace dmuon::common

#endif
