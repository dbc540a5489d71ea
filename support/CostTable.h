// --cost-table: measured Newton–Schulz seconds per matrix shape, for
// --cost-model=table (docs/dmuonc.md). A CSV file:
//
//   # comments and blank lines are ignored
//   rows,cols,seconds
//   768,2048,0.000412
//
// The first content line is the header; each other line one shape.
#ifndef DMUON_SUPPORT_COSTTABLE_H
#define DMUON_SUPPORT_COSTTABLE_H

#include "support/Diagnostics.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace dmuon {

using CostTableMap = std::map<std::pair<int64_t, int64_t>, double>;

// The longest measured time a table may give one matrix, in seconds (a
// day). A param's cost is at most 2^48 matrices of it, and 10M params of
// such costs still sum to a finite double: loads, bounds and imbalance stay
// meaningful.
inline constexpr double kMaxCostSeconds = 86400;
// The largest cost table read (a line per shape).
inline constexpr uint64_t kMaxCostTableBytes = uint64_t(64) << 20;

// Reads and checks `path`, reporting every malformed line as
// "path:line:col: error: ..." with the source line. Returns false on error.
bool loadCostTable(const std::string &path, Diagnostics &diags, CostTableMap &out);

// Parses CSV text already in memory (registered with `diags` under `name`).
bool parseCostTable(std::string_view text, const std::string &name, Diagnostics &diags,
                    CostTableMap &out);

// Seconds for one rows x cols matrix: the exact shape, else the transposed one.
std::optional<double> lookupCost(const CostTableMap &table, int64_t rows, int64_t cols);

} // namespace dmuon

#endif
