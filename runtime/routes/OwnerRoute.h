// The owner route's data movement, per hook group: each owner's params packed
// into one segment of the group's buffer and broadcast over the shard group
// (unshard), freed again (reshard), gradients reduced onto the owner in two
// phases (shard group, then down the owner's column: dp_replicate and the
// data-carrying dims the segment's params are Replicate on), and after the
// step the owner's updated masters broadcast down that column (the
// replicate broadcast, sync or consumed by the next unshard).
//
// It drives each hook group's lifecycle for every route that moves with the
// hooks: the group's sharded params (routes/ShardedRoute) share its buffers
// and are gathered and reduced at the same points. A group's gradient buffer
// is freed once its reduce has completed, two groups later in backward.
#ifndef DMUON_RUNTIME_ROUTES_OWNERROUTE_H
#define DMUON_RUNTIME_ROUTES_OWNERROUTE_H

#include "core/Context.h"
#include "core/Params.h"
#include "routes/ShardedRoute.h"

#include <deque>
#include <string>
#include <vector>

namespace dmuon::rt {

class OwnerRoute {
public:
  Status init(const Context &ctx, std::vector<ParamRt> &params, ShardedRoute &sharded);

  int numGroups() const { return static_cast<int>(groups_.size()); }
  const std::string &groupName(int g) const { return groups_[g].name; }
  // A param's packed values, or null while its group is not unsharded.
  uint8_t *packedValues(const ParamRt &p) const;
  // A param's gradient slot, or null outside its group's backward.
  float *gradSlot(const ParamRt &p) const;

  // Starts the group's broadcasts unless it is unsharded or in flight.
  Status unshard(int g);
  Status waitUnshard(int g);
  void reshard(int g);
  // The group's gradient buffer for backward: zeroed when new, kept (so
  // the host accumulates into it) while an earlier micro-batch's gradients
  // wait in it.
  Status beginBackward(int g);
  // Ends the group's backward: phase 1 of its reduce (phase 2 of earlier
  // groups overlaps it) when `communicate`, else the gradients stay here.
  Status endBackward(int g, bool communicate);
  // Completes every reduce and adds the averaged gradient to each global
  // owner's reduced gradient (I3); frees the gradient buffers.
  Status finishReduce();
  Status broadcastReplicas();
  Status waitReplicate(int g);
  void endStep();

private:
  struct Segment {
    int so = 0;
    bool owner = false; // this rank is its global owner
    // Its params' column: the phase-2 reduce and the replicate broadcast.
    OwnerColumn column;
    int64_t offset = 0, bytes = 0, reduceOffset = 0, reduceBytes = 0;
    int64_t masterElements = 0;
    std::vector<int> params;
  };
  enum class Unshard { Sharded, InFlight, Unsharded };
  struct PendingReplicate {
    int segment;
    DeviceArray staging;
    RequestId request;
  };
  struct Group {
    std::string name;
    std::vector<Segment> segments;
    int64_t bufferBytes = 0, reduceBufferBytes = 0;
    DeviceArray packed, grad;
    Unshard state = Unshard::Sharded;
    bool inBackward = false; // between beginBackward and endBackward
    std::vector<RequestId> broadcasts, phase1, phase2;
    std::vector<PendingReplicate> replicate;
  };

  Status pack(const Segment &seg, uint8_t *dst);
  Status issuePhase2(int g);
  // Waits for the group's phase 2, hands its averaged gradients to their
  // holders (owners' reduced gradients, shards) and frees its buffer.
  Status retire(int g);
  // Retires every group whose phase 2 has been issued, in issue order.
  Status retireIssued();
  Status reduceSegment(Group &grp, const Segment &seg, Communicator comm, int root, int mine,
                       int size, std::vector<RequestId> &requests);
  Status drainPhase2();

  const Context *ctx_ = nullptr;
  std::vector<ParamRt> *params_ = nullptr;
  ShardedRoute *sharded_ = nullptr;
  std::vector<Group> groups_;
  std::deque<int> phase2Queue_; // phase 1 issued
  std::deque<int> retireQueue_; // phase 2 issued
};

} // namespace dmuon::rt

#endif
