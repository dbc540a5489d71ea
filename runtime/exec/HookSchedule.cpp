#include "exec/HookSchedule.h"

#include <algorithm>

namespace dmuon::rt {

Status HookSchedule::init(const Context &ctx, std::vector<Route *> routes) {
  ctx_ = &ctx;
  routes_ = std::move(routes);
  const auto *hgs = ctx.plan.root().hook_groups();
  groups_.resize(hgs ? hgs->size() : 0);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const plan::HookGroup &hg = *hgs->Get(static_cast<flatbuffers::uoffset_t>(g));
    groups_[g].name = hg.name()->str();
    groups_[g].stage = hg.pipeline_stage();
    groups_[g].bufferBytes = hg.buffer_bytes();
    groups_[g].reduceBufferBytes = hg.reduce_buffer_bytes();
  }
  return Status::ok();
}

std::string HookSchedule::label(int g) const {
  return "hook group " + std::to_string(g) + " ('" + groups_[g].name + "')";
}

uint8_t *HookSchedule::packedValues(const ParamRt &p) const {
  const Group &grp = groups_[p.group];
  return grp.state == Unshard::Unsharded ? grp.packed.bytes() + p.plan->offset() : nullptr;
}

float *HookSchedule::gradSlot(const ParamRt &p) const {
  const Group &grp = groups_[p.group];
  // Outside backward the buffer belongs to the reduce (or waits for the
  // next micro-batch): no pointer into it is handed out.
  return grp.inBackward ? reinterpret_cast<float *>(grp.grad.bytes() + p.plan->reduce_offset())
                        : nullptr;
}

// ------------------------------------------------------------------ hooks

Status HookSchedule::preForward(int g) {
  Group &grp = groups_[g];
  if (grp.forwardStarted)
    return invalidState("pre_forward(" + std::to_string(g) + ") called twice in one step for " +
                        label(g) + "; call step() between steps");
  for (const Group &other : groups_)
    if (other.backwardStarted)
      return invalidState("pre_forward(" + std::to_string(g) +
                          ") after backward started; call step() first");
  DMUON_RETURN_IF_ERROR(unshard(g));
  grp.forwardStarted = true;
  // Forward prefetch: the next group's unshard overlaps this one's compute.
  if (g + 1 < numGroups() && onStage(g + 1) && !groups_[g + 1].forwardStarted)
    DMUON_RETURN_IF_ERROR(unshard(g + 1));
  return waitUnshard(g);
}

Status HookSchedule::postForward(int g, bool reshardAfter) {
  Group &grp = groups_[g];
  if (!grp.forwardStarted || grp.forwardDone)
    return invalidState("post_forward(" + std::to_string(g) + ") without a matching pre_forward");
  grp.forwardDone = true;
  if (reshardAfter)
    reshard(g);
  return Status::ok();
}

Status HookSchedule::preBackward(int g) {
  Group &grp = groups_[g];
  if (!grp.forwardDone)
    return invalidState("pre_backward(" + std::to_string(g) + ") before post_forward of " +
                        label(g));
  if (grp.backwardStarted)
    return invalidState("pre_backward(" + std::to_string(g) + ") called twice in one step");
  grp.backwardStarted = true;
  DMUON_RETURN_IF_ERROR(unshard(g)); // Z3 unshards again; Z2 kept the buffer
  DMUON_RETURN_IF_ERROR(waitUnshard(g));
  grp.inBackward = true;
  // A buffer kept from an earlier micro-batch holds its gradients: the
  // host accumulates into it.
  if (grp.grad.live())
    return Status::ok();
  return grp.grad.allocate(ctx_->device, static_cast<size_t>(grp.reduceBufferBytes),
                           &ctx_->memory.buffers);
}

Status HookSchedule::postBackward(int g, bool communicate) {
  Group &grp = groups_[g];
  if (!grp.backwardStarted || grp.backwardDone)
    return invalidState("post_backward(" + std::to_string(g) + ") without a matching pre_backward");
  DMUON_RETURN_IF_ERROR(endBackward(g, communicate));
  grp.backwardDone = true;
  return Status::ok();
}

bool HookSchedule::anyStarted() const {
  return std::any_of(groups_.begin(), groups_.end(),
                     [](const Group &grp) { return grp.forwardStarted || grp.backwardStarted; });
}

bool HookSchedule::anyOnStage() const {
  for (int g = 0; g < numGroups(); ++g)
    if (onStage(g))
      return true;
  return false;
}

bool HookSchedule::backwardDone() const { return pendingBackward() < 0; }

int HookSchedule::pendingBackward() const {
  for (int g = 0; g < numGroups(); ++g)
    if (!groups_[g].backwardDone && onStage(g))
      return g;
  return -1;
}

void HookSchedule::newMicroBatch() {
  for (Group &grp : groups_)
    grp.forwardStarted = grp.forwardDone = grp.backwardStarted = grp.backwardDone = false;
}

void HookSchedule::endStep() {
  newMicroBatch();
  for (Group &grp : groups_)
    if (!grp.packed.live())
      grp.state = Unshard::Sharded;
}

Status HookSchedule::synchronize() {
  for (int g = 0; g < numGroups(); ++g) {
    DMUON_RETURN_IF_ERROR(waitUnshard(g));
    for (Route *r : routes_)
      DMUON_RETURN_IF_ERROR(r->waitPublished(g));
  }
  return Status::ok();
}

// ---------------------------------------------------------------- unshard

Status HookSchedule::unshard(int g) {
  Group &grp = groups_[g];
  if (grp.state != Unshard::Sharded)
    return Status::ok();
  for (Route *r : routes_)
    DMUON_RETURN_IF_ERROR(r->waitPublished(g));
  DMUON_RETURN_IF_ERROR(grp.packed.allocate(ctx_->device, static_cast<size_t>(grp.bufferBytes),
                                            &ctx_->memory.buffers));
  // Every route's collectives of the group, coalesced.
  CollectiveGroup coalesced(ctx_->backend);
  DMUON_RETURN_IF_ERROR(coalesced.opened());
  for (Route *r : routes_)
    DMUON_RETURN_IF_ERROR(r->unshard(g, grp.packed.bytes(), grp.unsharding));
  grp.state = Unshard::InFlight;
  return coalesced.close();
}

Status HookSchedule::waitUnshard(int g) {
  Group &grp = groups_[g];
  for (RequestId id : grp.unsharding)
    DMUON_RETURN_IF_ERROR(ctx_->backend.wait(id));
  grp.unsharding.clear();
  if (grp.state == Unshard::InFlight)
    grp.state = Unshard::Unsharded;
  return Status::ok();
}

void HookSchedule::reshard(int g) {
  Group &grp = groups_[g];
  grp.packed.release();
  grp.state = Unshard::Sharded;
}

// ----------------------------------------------------------------- reduce

Status HookSchedule::endBackward(int g, bool communicate) {
  Group &grp = groups_[g];
  grp.inBackward = false;
  if (!communicate) {
    reshard(g);
    return Status::ok();
  }
  {
    CollectiveGroup coalesced(ctx_->backend);
    DMUON_RETURN_IF_ERROR(coalesced.opened());
    for (Route *r : routes_)
      DMUON_RETURN_IF_ERROR(r->reduceShards(g, grp.grad.bytes(), grp.phase1));
    DMUON_RETURN_IF_ERROR(coalesced.close());
  }
  reshard(g);
  // The reduce pipeline, in the same order on every rank as MPI requires:
  // the group two before this one in backward completes and frees its
  // buffer, the one before it starts phase 2 (overlapping this phase 1).
  DMUON_RETURN_IF_ERROR(retireIssued());
  DMUON_RETURN_IF_ERROR(drainPhase2());
  phase2Queue_.push_back(g);
  return Status::ok();
}

Status HookSchedule::drainPhase2() {
  while (!phase2Queue_.empty()) {
    const int q = phase2Queue_.front();
    phase2Queue_.pop_front();
    DMUON_RETURN_IF_ERROR(issuePhase2(q));
    retireQueue_.push_back(q);
  }
  return Status::ok();
}

Status HookSchedule::issuePhase2(int g) {
  Group &grp = groups_[g];
  for (RequestId id : grp.phase1)
    DMUON_RETURN_IF_ERROR(ctx_->backend.wait(id));
  grp.phase1.clear();
  CollectiveGroup coalesced(ctx_->backend);
  DMUON_RETURN_IF_ERROR(coalesced.opened());
  for (Route *r : routes_)
    DMUON_RETURN_IF_ERROR(r->reduceReplicas(g, grp.grad.bytes(), grp.phase2));
  return coalesced.close();
}

Status HookSchedule::abandon() {
  // Every rank issued the same collectives before it gave up: each completes
  // (unshards, the last step's replicate broadcasts, issued reduces), so no
  // request outlives the step that made it.
  DMUON_RETURN_IF_ERROR(synchronize());
  DMUON_RETURN_IF_ERROR(finishReduce());
  for (Group &grp : groups_) {
    grp.inBackward = false;
    if (grp.grad.live()) // a backward that never reached post_backward
      grp.grad.release();
  }
  return Status::ok();
}

Status HookSchedule::finishReduce() {
  DMUON_RETURN_IF_ERROR(drainPhase2());
  return retireIssued();
}

Status HookSchedule::retireIssued() {
  while (!retireQueue_.empty()) {
    const int q = retireQueue_.front();
    retireQueue_.pop_front();
    DMUON_RETURN_IF_ERROR(retire(q));
  }
  return Status::ok();
}

Status HookSchedule::retire(int g) {
  Group &grp = groups_[g];
  for (RequestId id : grp.phase2)
    DMUON_RETURN_IF_ERROR(ctx_->backend.wait(id));
  grp.phase2.clear();
  for (Route *r : routes_)
    DMUON_RETURN_IF_ERROR(r->collect(g, grp.grad.bytes()));
  grp.grad.release(); // I3: only the global owner keeps a reduced gradient
  return Status::ok();
}

} // namespace dmuon::rt
