// Executes a plan on one rank. The executor is what the host drives (bind,
// pre/post forward and backward, step) and the owner of this rank's state;
// the work itself lives with its concern:
//   exec/HookSchedule      each hook group's buffers and phases, calling
//                          every route at each hook
//   routes/Route           what moves how: OwnerRoute (broadcast / reduce to
//                          the owner / replicate broadcast), ShardedRoute
//                          (all-gather / reduce-scatter), ReplicatedRoute
//                          (all-reduce)
//   optim/Optimizer        the update rules: Muon (optim/GatheredMuon for
//                          matrices sharded over a model-parallel dim), AdamW
//   exec/GradNorm          the global gradient norm and clipping, over every
//                          route
//   optim/QkClip           QK-Clip of query/key heads, after the owner step
//   exec/ExecutorCheckpoint.cpp  saving and restoring the training state
//   exec/ExecutorTraining.cpp    micro-batches, schedules, norms, step counts
// Backend- and device-agnostic.
#ifndef DMUON_RUNTIME_EXEC_EXECUTOR_H
#define DMUON_RUNTIME_EXEC_EXECUTOR_H

#include "checkpoint/CheckpointFile.h"
#include "checkpoint/CheckpointSlice.h"
#include "core/Context.h"
#include "core/Params.h"
#include "exec/GradNorm.h"
#include "exec/HookSchedule.h"
#include "optim/Optimizers.h"
#include "optim/QkClip.h"
#include "routes/OwnerRoute.h"
#include "routes/ReplicatedRoute.h"
#include "routes/ShardedRoute.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dmuon::rt {

class Executor {
public:
  static Status create(const LoadedPlan &plan, const dmuon_runtime_options_t &options,
                       std::unique_ptr<Backend> backend, std::unique_ptr<Device> device,
                       std::unique_ptr<Executor> &out);

  Status bindParam(const std::string &name, const float *values, int64_t numel);
  // By plan index (checked by the caller): the per-layer calls.
  Status paramView(int index, void **out);
  Status gradView(int index, float **out);

  Status preForward(int g);
  Status postForward(int g);
  Status preBackward(int g);
  Status postBackward(int g);
  Status finishBackward();
  // DMUON_STEP_SKIPPED (not an error) when a gradient is not finite.
  Status step();
  // Collective: drops this step's gradients and hook state (after an
  // exception in the host's forward or backward); nothing is applied.
  Status abandonStep();
  Status synchronize();

  Status beginMicroBatch(bool isLast);
  Status setHyperParams(const dmuon_hyper_params_t &h);
  void hyperParams(dmuon_hyper_params_t &out) const;
  Status setParamGroupScale(const std::string &pattern, double lrScale, double wdScale);
  Status gradNorm(dmuon_grad_norm_t &out);
  void stepCounts(int64_t &applied, int64_t &skipped) const {
    applied = stepsApplied_;
    skipped = stepsSkipped_;
  }

  // QK-Clip (optim/QkClip.h).
  Status setQkMaxLogits(int pair, const float *values, int64_t count) {
    return qkClip_.setMaxLogits(pair, values, count);
  }
  void qkClipCounts(int64_t &lastStep, int64_t &total) const {
    lastStep = qkClip_.clippedLastStep();
    total = qkClip_.clippedTotal();
  }

  Status gatherParam(const std::string &name, float *out, int64_t numel);
  Status saveCheckpoint(const std::string &dir, int64_t step);
  Status loadCheckpoint(const std::string &dir, int64_t *step);
  Status paramState(const std::string &name, dmuon_param_state_t &out) const;
  const dmuon_comm_counters_t &counters() const { return counters_.get(); }
  void resetCounters() { counters_.reset(); }
  dmuon_comm_counters_t plannedCounters() const;
  void memory(dmuon_memory_report_t &out) const;
  void plannedMemory(dmuon_memory_report_t &out) const;
  double nsFlops() const { return optimizers_.nsFlops() + optimizers_.preconditionerFlops(); }

private:
  Executor() = default;
  Status init(const LoadedPlan &plan, const dmuon_runtime_options_t &options);
  Status agreeOnCreate(const LoadedPlan &plan, const Status &verdict);
  Status startMicroBatch();
  Status measureGradients();
  Status checkUpdatesFinite();
  Status sumUpdatedSquares(size_t begin, size_t end, double &out);
  void endStep();
  Status findParam(const std::string &name, int &index) const;
  Status checkGroup(int g, const char *call) const;
  // Refuses a param of another pipeline stage, naming both stages.
  Status checkOnStage(const ParamRt &p, const std::string &call) const;
  Status checkAllBound(const char *call);
  Status backwardComplete() const;
  Status readyToStep();
  bool midStep() const;
  uint64_t modelFingerprint() const;
  Status localSlices(std::vector<ckpt::LocalBoxes> &out) const;
  Status agree(const Status &local, const std::string &what);
  Status gatherShards(const ParamRt &p, const DeviceArray &shard, bool writes,
                      std::vector<float> &whole);
  // saveCheckpoint's steps, in order (ExecutorCheckpoint.cpp).
  struct WholeState;
  Status prepareSave(const std::string &dir, int64_t step, uint64_t &nonce,
                     std::vector<ckpt::LocalBoxes> &slices, ckpt::DirectoryLock &lock);
  Status gatherShardedState(std::vector<WholeState> &wholes);
  Status writeShard(const std::string &dir, int64_t step, uint64_t nonce,
                    const std::vector<ckpt::LocalBoxes> &slices,
                    const std::vector<WholeState> &wholes);
  Status writeSaveManifest(const std::string &dir, int64_t step, uint64_t nonce);

  // Declared first so it is destroyed last: every DeviceArray below frees
  // through it.
  std::unique_ptr<Device> device_;
  const LoadedPlan *plan_ = nullptr;
  Topology topo_;
  Config config_;
  CommCounters counters_;
  MemoryAccounts memory_;
  std::optional<Context> ctx_;

  std::vector<ParamRt> params_;
  OptimizerSet optimizers_;
  OwnerRoute ownerRoute_;
  ShardedRoute shardedRoute_;
  ReplicatedRoute replicatedRoute_;
  // Every route, in the order they are called; and by plan::Route (null:
  // the host's).
  std::vector<Route *> routes_, routeOf_;
  HookSchedule hooks_;
  GradNorm gradNorm_;
  DeviceArray updateCheck_; // checkUpdatesFinite's device sum (a double) and agreed index (a float)
  QkClip qkClip_;
  bool allBound_ = false, started_ = false, backwardFinished_ = false;
  // Micro-batches: whether one is between its first pre_forward and its
  // last post_backward, how many this step has run, whether the current
  // one is the step's last and what the host declared for the next.
  bool inMicroBatch_ = false, currentLast_ = true, nextLast_ = true;
  int microBatches_ = 0, microBatchesLastStep_ = 1;
  GradNorms norms_;
  double clipCoef_ = 1;
  bool normsValid_ = false, gradientsMeasured_ = false;
  int64_t stepsApplied_ = 0, stepsSkipped_ = 0;
  int64_t adamwStep_ = 0; // AdamW's bias-correction step, every route's
  // Declared last so it is destroyed first: it completes pending collectives
  // before the buffers they touch are freed.
  std::unique_ptr<Backend> backend_;
};

} // namespace dmuon::rt

#endif
