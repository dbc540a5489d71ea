// The hook schedule: each hook group's buffers and where the group is in
// this step, and every route's part at each of its points. pre_forward
// unshards a group (the next one's unshard overlapping its compute),
// post_forward frees it under Z3, pre_backward unshards it again and hands
// out its gradient buffer, post_backward starts its reduce. The reduce is a
// pipeline over the groups: phase 1 (over dp_shard) of a group overlaps
// phase 2 (over the replicas) of the one before it, and a group's gradient
// buffer is freed once its reduce has completed, two groups later.
#ifndef DMUON_RUNTIME_EXEC_HOOKSCHEDULE_H
#define DMUON_RUNTIME_EXEC_HOOKSCHEDULE_H

#include "routes/Route.h"

#include <deque>
#include <string>
#include <vector>

namespace dmuon::rt {

class HookSchedule {
public:
  // `routes` are called at each point in their order.
  Status init(const Context &ctx, std::vector<Route *> routes);

  int numGroups() const { return static_cast<int>(groups_.size()); }
  // Whether group g is of this rank's pipeline stage (always, without one),
  // and its stage.
  bool onStage(int g) const { return groups_[g].stage == ctx_->topo.stage; }
  int stageOf(int g) const { return groups_[g].stage; }
  // Whether this rank's stage has a hook group (a stage of AdamW params
  // alone may have none).
  bool anyOnStage() const;
  // "hook group 3 ('layers.1')", as errors name it.
  std::string label(int g) const;
  // A param's packed values, or null while its group is not unsharded.
  uint8_t *packedValues(const ParamRt &p) const;
  // A param's gradient slot, or null outside its group's backward.
  float *gradSlot(const ParamRt &p) const;

  // The hooks, refused out of order. pre_forward marks the group started
  // once its unshard is issued (forwardStarted), even if what follows fails.
  Status preForward(int g);
  bool forwardStarted(int g) const { return groups_[g].forwardStarted; }
  Status postForward(int g, bool reshard);
  Status preBackward(int g);
  // Phase 1 of the group's reduce when `communicate`; otherwise its
  // gradients stay in its buffer for the next micro-batch.
  Status postBackward(int g, bool communicate);

  bool anyStarted() const;
  bool backwardDone() const;
  // The first group whose backward is not done, or -1.
  int pendingBackward() const;
  // Completes every reduce; the routes collect the averaged gradients.
  Status finishReduce();
  // Completes everything in flight and drops the gradients of backwards that
  // did not reach their reduce: the step is abandoned (Executor::abandonStep).
  Status abandon();
  // A new micro-batch runs the hooks again.
  void newMicroBatch();
  void endStep();
  // Completes every unshard and every route's publish.
  Status synchronize();

private:
  enum class Unshard { Sharded, InFlight, Unsharded };
  struct Group {
    std::string name;
    int stage = 0; // its pipeline stage
    int64_t bufferBytes = 0, reduceBufferBytes = 0;
    DeviceArray packed, grad;
    Unshard state = Unshard::Sharded;
    bool inBackward = false; // between pre_backward and post_backward
    bool forwardStarted = false, forwardDone = false;
    bool backwardStarted = false, backwardDone = false;
    std::vector<RequestId> unsharding, phase1, phase2;
  };

  // Starts the group's unshard unless it is unsharded or in flight.
  Status unshard(int g);
  Status waitUnshard(int g);
  void reshard(int g);
  Status endBackward(int g, bool communicate);
  Status issuePhase2(int g);
  Status drainPhase2();
  // Waits for the group's phase 2, lets the routes collect its averaged
  // gradients and frees its buffer.
  Status retire(int g);
  // Retires every group whose phase 2 has been issued, in issue order.
  Status retireIssued();

  const Context *ctx_ = nullptr;
  std::vector<Route *> routes_;
  std::vector<Group> groups_;
  std::deque<int> phase2Queue_; // phase 1 issued
  std::deque<int> retireQueue_; // phase 2 issued
};

} // namespace dmuon::rt

#endif
