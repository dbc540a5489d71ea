// The mesh of a plan as its readers see it, once the verifier has passed it:
// the dims (row-major: rank = sum of coordinate x stride), which of them are
// the ownership dims dp_shard and dp_replicate and which carry data, the G x
// R owner slots, the D data indices (plan 1.4 on; D = 1 before), and the rank
// of each owner. The printers and the simulator read the mesh through it.
#ifndef DMUON_PLAN_PLANVIEW_H
#define DMUON_PLAN_PLANVIEW_H

#include "dmuon/plan_generated.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon {

struct PlanView {
  PlanView() = default; // a mesh of one rank
  explicit PlanView(const plan::Plan &p);

  int64_t slots() const { return G * R; }
  int64_t fineSlots() const { return G * R * D; }
  int64_t slotShard(int64_t slot) const { return slot < 0 ? -1 : slot % G; }
  int64_t slotReplicate(int64_t slot) const { return slot < 0 ? -1 : slot / G; }
  // Rank of owner slot (s, r) with every other mesh dim at 0.
  int64_t slotRank(int64_t s, int64_t r) const;
  // Rank of owner (s, r, data index d): the data-carrying dims at d's
  // coordinates.
  int64_t ownerRank(int64_t s, int64_t r, int64_t d) const;
  // The same on pipeline stage `stage` (1.9): the stage dim at `stage`.
  int64_t stageOwnerRank(int64_t s, int64_t r, int64_t d, int64_t stage) const;
  // A rank's pipeline stage (0 without a stage dim).
  int64_t stageOfRank(int64_t rank) const;
  // The coordinate of a rank on every dim.
  std::vector<int64_t> coord(int64_t rank) const;
  // The product of the dims' sizes.
  int64_t ranks() const;

  std::vector<int64_t> dims;
  std::vector<std::string> dimNames;
  std::vector<bool> carriesData;
  int shardDim = -1, replicateDim = -1;
  int stageDim = -1; // 1.9: the pipeline dim, -1 if none
  int64_t P = 1;     // pipeline stages
  int64_t G = 1, R = 1;
  int64_t D = 1;
};

} // namespace dmuon

#endif
