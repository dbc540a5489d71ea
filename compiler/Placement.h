// DTensor-style placements of a tensor on one mesh dim (docs/dmuonc.md,
// "Grouping" and "Model parallelism").
#ifndef DMUON_COMPILER_PLACEMENT_H
#define DMUON_COMPILER_PLACEMENT_H

#include "dmuon/plan_generated.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace dmuon {

// The plan's placement kinds (include/dmuon/plan.fbs).
using PlacementKind = plan::PlacementKind;

struct Placement {
  PlacementKind kind = PlacementKind::replicate;
  int dim = 0;         // Shard / StridedShard
  int splitFactor = 1; // StridedShard
  std::string reduceOp = "sum"; // Partial

  // StridedShard is a Shard for grouping purposes (docs/dmuonc.md#grouping).
  bool isShard() const {
    return kind == PlacementKind::shard || kind == PlacementKind::strided_shard;
  }
  bool isReplicate() const { return kind == PlacementKind::replicate; }
  // The spelling users write and the plan prints: Shard(0), Replicate, ...
  std::string str() const;
  // The grouping key (docs/dmuonc.md#grouping): StridedShard keys as Shard(dim).
  std::string groupKey() const;
};

// Parses "Replicate", "Replicate()", "Shard(d)", "StridedShard(d, k)",
// "Partial", "Partial(op)". On failure returns false, sets `error` and the
// 0-based column of the offending character in `errorCol`.
bool parsePlacement(std::string_view text, Placement &out, std::string &error,
                    size_t &errorCol);

} // namespace dmuon

#endif
