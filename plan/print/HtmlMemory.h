// The HTML report's per-rank memory chart: one stacked bar per rank, by the
// categories of the plan's memory figures (docs/plan-format.md).
#ifndef DMUON_PLAN_PRINT_HTMLMEMORY_H
#define DMUON_PLAN_PRINT_HTMLMEMORY_H

#include "common/RankRows.h"
#include "dmuon/plan_generated.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon::planfile::print {

// The categories of a rank's memory figures, with the report's colours;
// they add up to RankFigures.memory_bytes.
struct MemoryCategory {
  const char *name;
  const char *colour;
  int64_t (*bytes)(const dmuon::plan::RankFigures &);
};
inline constexpr int kNumMemoryCategories = 6;
extern const MemoryCategory kMemoryCategories[kNumMemoryCategories];

// A <section> with an inline SVG: a bar for each of `rows` (indices into
// `listed`: ranks, or runs of ranks with equal figures), all on the scale of
// the largest rank's memory.
std::string htmlMemoryChart(const std::vector<common::RankRows::Listed> &listed,
                            const std::vector<uint32_t> &rows);

} // namespace dmuon::planfile::print

#endif
