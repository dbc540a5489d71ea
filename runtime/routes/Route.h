// A route: how its params' values reach forward and backward, how their
// gradients are averaged, and which ranks apply their updates. The hook
// schedule (exec/HookSchedule) calls every route at each point of a hook
// group's life, and the executor at each point of the step, always in the
// same order on every rank: collectives must be issued in one order
// everywhere (MPI's and NCCL's rule). A route with nothing to do at a point
// keeps the default, which does nothing.
#ifndef DMUON_RUNTIME_ROUTES_ROUTE_H
#define DMUON_RUNTIME_ROUTES_ROUTE_H

#include "core/Context.h"
#include "core/Params.h"

#include <vector>

namespace dmuon::rt {

// This rank's averaged gradient of a param: `count` floats, or null where
// this rank holds none.
struct GradView {
  float *data = nullptr;
  int64_t count = 0;
};

class Route {
public:
  virtual ~Route() = default;

  // ---- A hook group's life (routes whose params move with the hooks).
  // Writes this rank's values of group g into the group's `packed` buffer
  // and starts the collectives that fill in the other ranks'.
  virtual Status unshard(int /*g*/, uint8_t * /*packed*/, std::vector<RequestId> & /*requests*/) {
    return Status::ok();
  }
  // Phase 1 of group g's reduce, once its backward is done: the gradients
  // in `grad` summed over dp_shard.
  virtual Status reduceShards(int /*g*/, uint8_t * /*grad*/,
                              std::vector<RequestId> & /*requests*/) {
    return Status::ok();
  }
  // Phase 2, once phase 1 has completed: summed over the replicas (and the
  // owner's column).
  virtual Status reduceReplicas(int /*g*/, uint8_t * /*grad*/,
                                std::vector<RequestId> & /*requests*/) {
    return Status::ok();
  }
  // Takes group g's averaged gradients out of `grad` before it is freed.
  virtual Status collect(int /*g*/, const uint8_t * /*grad*/) { return Status::ok(); }
  // Completes what an earlier step's publish() left in flight for group g;
  // its next unshard reads what that wrote.
  virtual Status waitPublished(int /*g*/) { return Status::ok(); }

  // ---- The step, after every hook group's reduce has completed.
  // Completes this step's averaging of the gradients outside the hooks.
  virtual Status finishGradients() { return Status::ok(); }
  // The averaged gradient of plan param `index` (one of this route's).
  virtual GradView averagedGrad(int index) = 0;
  // Multiplies the gradients clipping covers by `factor`: the AdamW
  // params', and the Muon params' too when `muonToo`.
  virtual Status scaleGrads(float factor, bool muonToo) = 0;
  // Drops this step's gradients (a skipped step).
  virtual Status zeroGrads() = 0;
  // Applies the update of every param this rank steps; `adamwStep` is
  // AdamW's bias-correction step.
  virtual Status step(int64_t adamwStep) = 0;
  // After every route's step: sends the updated values to the ranks that
  // read them.
  virtual Status publish() { return Status::ok(); }
};

} // namespace dmuon::rt

#endif
