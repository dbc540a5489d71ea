// Where this rank sits in the plan's mesh (plan/PlanView.h): its coordinate
// (row-major over the mesh dims, as the plan's rank order), its owner slot
// (s, r) on the ownership dims, and the communicators the routes use. The
// only place the runtime turns coordinates into ranks.
#ifndef DMUON_RUNTIME_CORE_TOPOLOGY_H
#define DMUON_RUNTIME_CORE_TOPOLOGY_H

#include "base/Status.h"
#include "dmuon/plan_generated.h"
#include "hal/Backend.h"

#include <map>
#include <vector>

namespace dmuon::rt {

struct Topology {
  int rank = 0;
  int G = 1, R = 1; // dp_shard and dp_replicate sizes
  int s = 0, r = 0; // this rank's owner slot
  int shardDim = -1, replicateDim = -1;
  // The pipeline dim (-1 without one) and this rank's stage on it: a rank
  // holds and hooks only its stage's params (docs/runtime.md).
  int stageDim = -1, stage = 0;
  std::vector<int> dimSizes, coord;
  std::vector<bool> carriesData; // per mesh dim (docs/runtime.md)
  // Ranks whose data meet in an averaged gradient, the divisor of every
  // reduce: G * R * the data-carrying dims' sizes.
  int64_t dataParallelSize = 1;
  // Mesh dims -> the communicator along them (created once each).
  std::map<std::vector<int>, Communicator> along;

  // From the plan's mesh as every reader sees it (plan/PlanView.h).
  static Topology of(const dmuon::plan::Plan &plan, int rank);

  // Row-major rank of a full coordinate.
  int rankOf(const std::vector<int> &c) const;
  // The rank with this rank's model-parallel coordinate at owner slot (s, r).
  int rankAtSlot(int slotS, int slotR) const;
  // Rank of owner slot (s, r) inside the DataParallel communicator.
  int dataParallelRank(int slotS, int slotR) const { return slotR * G + slotS; }

  // The Shard, Replicate and DataParallel communicators.
  Status createOwnershipGroups(Backend &backend) const;
  // The communicator along model-parallel mesh dims `dims` (ranks that
  // differ only there; created once per set, in the caller's order, which
  // must be the same on every rank).
  Status groupAlong(Backend &backend, const std::vector<int> &dims, Communicator &out);
  int sizeAlong(const std::vector<int> &dims) const;
  // This rank's coordinate with the data-carrying dims at those of data
  // index `dataIndex` (docs/plan-format.md, "Owner slots and ranks").
  std::vector<int> withDataIndex(int64_t dataIndex) const;
  // The row-major index of coordinate `c` along `dims` (in that order): its
  // rank in the groupAlong(dims) communicator.
  int indexAlong(const std::vector<int> &dims, const std::vector<int> &c) const;
};

} // namespace dmuon::rt

#endif
