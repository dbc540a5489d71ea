#include "exec/Executor.h"

#include <algorithm>
#include <cmath>

namespace dmuon::rt {

// ------------------------------------------------------------------ set-up

Status Executor::create(const LoadedPlan &plan, const dmuon_runtime_options_t &options,
                        std::unique_ptr<Backend> backend, std::unique_ptr<Device> device,
                        std::unique_ptr<Executor> &out) {
  std::unique_ptr<Executor> ex(new Executor());
  ex->backend_ = std::move(backend);
  ex->device_ = std::move(device);
  DMUON_RETURN_IF_ERROR(ex->init(plan, options));
  out = std::move(ex);
  return Status::ok();
}

Status Executor::init(const LoadedPlan &plan, const dmuon_runtime_options_t &options) {
  plan_ = &plan;
  Status verdict;
  DMUON_RETURN_IF_ERROR(Config::resolve(plan.root(), options, config_, verdict));
  DMUON_RETURN_IF_ERROR(agreeOnCreate(plan, verdict));
  DMUON_RETURN_IF_ERROR(checkExecutable(plan));

  topo_ = Topology::of(plan.root(), backend_->worldRank());
  DMUON_RETURN_IF_ERROR(topo_.createOwnershipGroups(*backend_));
  DMUON_RETURN_IF_ERROR(buildParams(plan, topo_, *backend_, params_));
  ctx_.emplace(Context{plan, topo_, config_, *device_, *backend_, counters_, memory_});
  DMUON_RETURN_IF_ERROR(optimizers_.assign(*ctx_, params_));
  DMUON_RETURN_IF_ERROR(ownerRoute_.init(*ctx_, params_));
  DMUON_RETURN_IF_ERROR(shardedRoute_.init(*ctx_, params_));
  DMUON_RETURN_IF_ERROR(replicatedRoute_.init(*ctx_, params_));
  routes_ = {&ownerRoute_, &shardedRoute_, &replicatedRoute_};
  routeOf_.assign(static_cast<size_t>(plan::Route::MAX) + 1, nullptr);
  routeOf_[static_cast<size_t>(plan::Route::owner)] = &ownerRoute_;
  routeOf_[static_cast<size_t>(plan::Route::sharded)] = &shardedRoute_;
  routeOf_[static_cast<size_t>(plan::Route::replicated)] = &replicatedRoute_;
  DMUON_RETURN_IF_ERROR(hooks_.init(*ctx_, routes_));
  DMUON_RETURN_IF_ERROR(gradNorm_.init(*ctx_));
  DMUON_RETURN_IF_ERROR(updateCheck_.allocate(*device_, sizeof(double) + sizeof(float)));
  return qkClip_.init(*ctx_, params_);
}

// Agree first, decide after: every rank sees every rank's fingerprint, world
// size, options and verdict on them before any collective that needs all
// ranks, so all ranks fail (or succeed) together instead of some waiting
// forever in a collective the others skipped.
Status Executor::agreeOnCreate(const LoadedPlan &plan, const Status &verdict) {
  std::vector<uint64_t> fingerprints, worlds, verdicts, settings;
  DMUON_RETURN_IF_ERROR(backend_->allGather(plan.fingerprint(), fingerprints));
  DMUON_RETURN_IF_ERROR(backend_->allGather(static_cast<uint64_t>(plan.worldSize()), worlds));
  DMUON_RETURN_IF_ERROR(backend_->allGather(static_cast<uint64_t>(verdict.code()), verdicts));
  DMUON_RETURN_IF_ERROR(backend_->allGather(config_.hash(), settings));
  const int world = backend_->worldSize();
  DMUON_RETURN_IF_ERROR(verdict);
  for (int i = 0; i < world; ++i)
    if (verdicts[i] != DMUON_SUCCESS)
      return Status(static_cast<dmuon_status_t>(verdicts[i]),
                    "rank " + std::to_string(i) + " refused its options (see that rank's error)");
  for (int i = 0; i < world; ++i)
    if (settings[i] != settings[0])
      return mismatch("rank " + std::to_string(i) +
                      "'s runtime options differ from rank 0's; mode, replicate_async, "
                      "manage_adamw and every hyper-parameter must be equal on all ranks");
  for (int i = 0; i < world; ++i)
    if (worlds[i] != static_cast<uint64_t>(world))
      return mismatch("rank " + std::to_string(i) + " holds a plan for " +
                      std::to_string(worlds[i]) + " ranks but the communicator has " +
                      std::to_string(world) + " ranks");
  for (int i = 0; i < world; ++i)
    if (fingerprints[i] != fingerprints[0]) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "rank %d holds plan 0x%016llx but rank 0 holds 0x%016llx",
                    i, static_cast<unsigned long long>(fingerprints[i]),
                    static_cast<unsigned long long>(fingerprints[0]));
      return mismatch(buf);
    }
  return Status::ok();
}

Status Executor::findParam(const std::string &name, int &index) const {
  index = plan_->findParam(name);
  if (index < 0)
    return invalidArgument("the plan has no param named '" + name + "'");
  return Status::ok();
}

Status Executor::checkGroup(int g, const char *call) const {
  if (g < 0 || g >= hooks_.numGroups())
    return invalidArgument(std::string(call) + ": hook group " + std::to_string(g) +
                           " is out of range (the plan has " +
                           std::to_string(hooks_.numGroups()) + ")");
  if (!hooks_.onStage(g))
    return invalidArgument(std::string(call) + ": " + hooks_.label(g) + " is on pipeline stage " +
                           std::to_string(hooks_.stageOf(g)) + "; rank " +
                           std::to_string(topo_.rank) + " is on stage " +
                           std::to_string(topo_.stage) + " and runs its own stage's hooks only");
  return Status::ok();
}

Status Executor::checkOnStage(const ParamRt &p, const std::string &call) const {
  if (p.plan->pipeline_stage() == topo_.stage)
    return Status::ok();
  return invalidArgument(call + ": param '" + p.name + "' is on pipeline stage " +
                         std::to_string(p.plan->pipeline_stage()) + "; rank " +
                         std::to_string(topo_.rank) + " is on stage " +
                         std::to_string(topo_.stage) +
                         " and holds its own stage's params only (dmuon_plan_param_stage)");
}

// ---------------------------------------------------------------- binding

namespace {

int64_t fullNumel(const dmuon::plan::Param &p) {
  int64_t n = 1;
  for (int64_t d : *p.shape())
    n *= d;
  return n;
}

} // namespace

Status Executor::bindParam(const std::string &name, const float *values, int64_t numel) {
  int i;
  DMUON_RETURN_IF_ERROR(findParam(name, i));
  ParamRt &p = params_[i];
  DMUON_RETURN_IF_ERROR(checkOnStage(p, "bind_param('" + name + "')"));
  if (!values && p.sliceNumel > 0) // a 0-element slice has no values to point at
    return invalidArgument("bind_param('" + name + "'): values is null");
  if (numel != p.sliceNumel)
    return invalidArgument("bind_param('" + name + "'): got " + std::to_string(numel) +
                           " values but the plan's shape has " + std::to_string(p.sliceNumel) +
                           " for this rank's slice (the full param has " +
                           std::to_string(fullNumel(*p.plan)) +
                           "; dmuon_plan_param_slice says which slice)");
  if (started_)
    return invalidState("bind_param('" + name + "') after training started");
  if (p.route == plan::Route::host)
    return Status::ok(); // the host's own: nothing here to bind
  // Everything is allocated before anything is replaced, so a failed bind
  // leaves the param as it was. The owner route keeps the master on the
  // owner's shard column (I2) and the optimizer state on the owner; the
  // sharded route this rank's shard of everything; the replicated route all
  // of it everywhere.
  MemoryAccounts &acct = memory_;
  const bool owner = p.route == plan::Route::owner;
  const bool sharded = p.route == plan::Route::sharded;
  // Held padded to the largest model-parallel slice (Params.h); the
  // padding stays zero.
  const size_t bytes = static_cast<size_t>(p.heldElements()) * sizeof(float);
  const int64_t shardOwn =
      std::max<int64_t>(0, std::min(p.shard.real, numel - p.shard.begin));
  DeviceArray master, gradShard;
  std::vector<DeviceArray> state(p.state.size());
  if (p.keepsValues()) {
    DMUON_RETURN_IF_ERROR(master.allocate(*device_, bytes, owner ? &acct.masters : &acct.values));
    // A shard past the rank's own slice is padding alone; a 0-element slice
    // may come without values.
    if (const int64_t own = sharded ? shardOwn : numel; own > 0)
      DMUON_RETURN_IF_ERROR(device_->upload(
          master.bytes(), values + (sharded ? p.shard.begin : 0),
          static_cast<size_t>(own) * sizeof(float)));
  }
  if (p.stepsHere()) {
    const std::span<const StateField> fields = p.optimizer->fields();
    for (size_t k = 0; k < fields.size(); ++k)
      DMUON_RETURN_IF_ERROR(state[k].allocate(
          *device_, static_cast<size_t>(stateElements(p, fields[k])) * sizeof(float),
          &(acct.*fields[k].account)));
  }
  if (sharded)
    DMUON_RETURN_IF_ERROR(gradShard.allocate(*device_, bytes, &acct.grads));
  p.master = std::move(master);
  p.state = std::move(state);
  p.shard.grad = std::move(gradShard);
  p.bound = true;
  return Status::ok();
}

Status Executor::paramView(int i, void **out) {
  ParamRt &p = params_[i];
  const std::string &name = p.name;
  DMUON_RETURN_IF_ERROR(checkOnStage(p, "param_view"));
  if (p.route == plan::Route::host)
    return invalidArgument("param '" + name +
                           "' travels the host route: the runtime holds nothing of it");
  if (p.route == plan::Route::replicated) {
    if (!p.bound)
      return invalidState("param '" + name + "' is not bound yet");
    *out = p.master.bytes();
    return Status::ok();
  }
  uint8_t *packed = hooks_.packedValues(p);
  if (!packed)
    return invalidState("param '" + name + "' is not unsharded: its " + hooks_.label(p.group) +
                        " is between hooks (call pre_forward or pre_backward first)");
  *out = packed;
  return Status::ok();
}

Status Executor::gradView(int i, float **out) {
  ParamRt &p = params_[i];
  const std::string &name = p.name;
  DMUON_RETURN_IF_ERROR(checkOnStage(p, "grad_view"));
  if (p.route == plan::Route::host)
    return invalidArgument("param '" + name +
                           "' travels the host route: the runtime holds no gradient of it");
  if (p.route == plan::Route::replicated) {
    *out = replicatedRoute_.gradSlot(i);
    return Status::ok();
  }
  float *slot = hooks_.gradSlot(p);
  if (!slot)
    return invalidState("no gradient buffer for param '" + name + "': its " +
                        hooks_.label(p.group) +
                        " is not between pre_backward and post_backward");
  *out = slot;
  return Status::ok();
}

// ------------------------------------------------------------------ hooks

Status Executor::preForward(int g) {
  DMUON_RETURN_IF_ERROR(checkGroup(g, "pre_forward"));
  DMUON_RETURN_IF_ERROR(checkAllBound("pre_forward"));
  if (!inMicroBatch_)
    DMUON_RETURN_IF_ERROR(startMicroBatch());
  const Status unsharded = hooks_.preForward(g);
  if (hooks_.forwardStarted(g))
    started_ = true;
  return unsharded;
}

// A micro-batch starts with its first pre_forward; the one before it must
// have finished its backward and have been declared not the last.
Status Executor::startMicroBatch() {
  if (microBatches_ > 0) {
    if (currentLast_ || backwardFinished_)
      return invalidState("pre_forward after the step's last micro-batch; call step() first "
                          "(or declare a micro-batch not the last with "
                          "dmuon_runtime_begin_micro_batch)");
    if (!config_.accumulateLocally) // its reduce completes before the next one's
      DMUON_RETURN_IF_ERROR(hooks_.finishReduce());
    hooks_.newMicroBatch();
  }
  currentLast_ = nextLast_;
  nextLast_ = true;
  inMicroBatch_ = true;
  ++microBatches_;
  return Status::ok();
}

Status Executor::postForward(int g) {
  DMUON_RETURN_IF_ERROR(checkGroup(g, "post_forward"));
  return hooks_.postForward(g, config_.z3);
}

Status Executor::preBackward(int g) {
  DMUON_RETURN_IF_ERROR(checkGroup(g, "pre_backward"));
  return hooks_.preBackward(g);
}

Status Executor::postBackward(int g) {
  DMUON_RETURN_IF_ERROR(checkGroup(g, "post_backward"));
  // Local accumulation keeps the gradients here until the last micro-batch.
  DMUON_RETURN_IF_ERROR(hooks_.postBackward(g, currentLast_ || !config_.accumulateLocally));
  inMicroBatch_ = !hooks_.backwardDone();
  return Status::ok();
}

// What finish_backward refuses before it waits on anything.
Status Executor::backwardComplete() const {
  if (backwardFinished_)
    return Status::ok();
  if (const int g = hooks_.pendingBackward(); g >= 0)
    return invalidState("finish_backward before post_backward of " + hooks_.label(g));
  if (!currentLast_)
    return invalidState("finish_backward after a micro-batch declared not the last; run the "
                        "step's last micro-batch first");
  return Status::ok();
}

Status Executor::finishBackward() {
  if (backwardFinished_)
    return Status::ok();
  DMUON_RETURN_IF_ERROR(backwardComplete());
  DMUON_RETURN_IF_ERROR(hooks_.finishReduce());
  backwardFinished_ = true;
  return Status::ok();
}

// The all-reduces outside the hooks and the norm's, once per step, after
// every hook group's reduce.
Status Executor::measureGradients() {
  if (gradientsMeasured_)
    return Status::ok();
  DMUON_RETURN_IF_ERROR(finishBackward());
  for (Route *r : routes_)
    DMUON_RETURN_IF_ERROR(r->finishGradients());
  DMUON_RETURN_IF_ERROR(gradNorm_.measure(params_, routeOf_, norms_));
  clipCoef_ = clipFactor(config_, norms_);
  normsValid_ = true;
  gradientsMeasured_ = true;
  return Status::ok();
}

// ------------------------------------------------------------------- step

Status Executor::checkAllBound(const char *call) {
  if (allBound_)
    return Status::ok();
  for (const ParamRt &p : params_)
    if (!p.bound)
      return invalidState(std::string(call) + ": param '" + p.name +
                          "' is not bound (bind every param first)");
  allBound_ = true;
  return Status::ok();
}

// What step() refuses on this rank alone, before any collective.
Status Executor::readyToStep() {
  // A rank whose stage has no hook group (every param of it AdamW or the
  // host's, or a plan without hook groups) has no hook to start training
  // with: there, the first step does.
  if (!started_ && hooks_.anyOnStage())
    return invalidState("step before any forward/backward (call the hooks first)");
  DMUON_RETURN_IF_ERROR(checkAllBound("step"));
  return backwardComplete();
}

Status Executor::step() {
  // Every rank learns every rank's refusal before the step's collectives: a
  // rank that returned alone would leave its peers waiting in them (forever
  // without a timeout). One 8-byte all-gather per step.
  DMUON_RETURN_IF_ERROR(agree(readyToStep(), "step"));
  started_ = true;
  DMUON_RETURN_IF_ERROR(measureGradients());
  const bool finite = norms_.finite();
  if (!finite || squaresOverflowState(config_, norms_, clipCoef_)) {
    // Every rank saw the same sums, so every rank skips: nothing changes.
    for (Route *r : routes_)
      DMUON_RETURN_IF_ERROR(r->zeroGrads());
    qkClip_.discard();
    endStep();
    ++stepsSkipped_;
    return Status(DMUON_STEP_SKIPPED,
                  std::string("step skipped: ") +
                      (finite ? "the gradients' squared norm (after clipping) is past fp32's "
                                "range, where the optimizer state would become Inf"
                              : "a gradient element is NaN or Inf") +
                      "; no param or optimizer state changed");
  }
  DMUON_RETURN_IF_ERROR(gradNorm_.clip(routes_, clipCoef_));
  ++adamwStep_;
  // Each route publishes as soon as it has stepped: the owners' replicate
  // broadcasts fly while the other routes update.
  for (Route *r : routes_) {
    DMUON_RETURN_IF_ERROR(r->step(adamwStep_));
    if (r == &ownerRoute_) // on the owners' masters, before publish() carries them
      DMUON_RETURN_IF_ERROR(qkClip_.apply());
    DMUON_RETURN_IF_ERROR(r->publish());
  }
  endStep();
  ++stepsApplied_;
  return checkUpdatesFinite();
}

Status Executor::abandonStep() {
  DMUON_RETURN_IF_ERROR(agree(hooks_.abandon(), "abandon_step"));
  for (Route *r : routes_)
    DMUON_RETURN_IF_ERROR(r->zeroGrads());
  qkClip_.discard();
  endStep();
  nextLast_ = true; // the step starts again from its first micro-batch
  return Status::ok();
}

// Whether this rank updated p's fp32 values in step(): host-routed params
// are the host's to step, and the rest keep their values where they step.
static bool updatedHere(const ParamRt &p) {
  return p.route != plan::Route::host && p.stepsHere() && p.master.floats() && p.heldElements() > 0;
}

// The sum of squares of the values this rank updated, of params [begin,
// end), on the device (the kernels' accumulator is device memory).
Status Executor::sumUpdatedSquares(size_t begin, size_t end, double &out) {
  auto *acc = reinterpret_cast<double *>(updateCheck_.bytes());
  DMUON_RETURN_IF_ERROR(device_->zero(acc, sizeof(double)));
  for (size_t i = begin; i < end; ++i)
    if (const ParamRt &p = params_[i]; updatedHere(p))
      DMUON_RETURN_IF_ERROR(device_->addSumOfSquares(p.master.floats(), p.heldElements(), acc));
  return device_->download(&out, acc, sizeof out);
}

// Finite gradients can still give a non-finite update (fp32 overflow of a
// huge param or learning rate): every rank reports it together, naming the
// param, instead of stepping on Inf and skipping every later step. One sum
// over every updated value per step; only when it is not finite are the
// params summed one by one to name the first.
Status Executor::checkUpdatesFinite() {
  double all = 0;
  DMUON_RETURN_IF_ERROR(sumUpdatedSquares(0, params_.size(), all));
  float firstBad = 0; // plan index + 1 (exact in fp32: plans hold < 2^24 params)
  for (size_t i = 0; !std::isfinite(all) && i < params_.size() && firstBad == 0; ++i) {
    double one = 0;
    DMUON_RETURN_IF_ERROR(sumUpdatedSquares(i, i + 1, one));
    if (!std::isfinite(one))
      firstBad = static_cast<float>(i + 1);
  }
  if (backend_->worldSize() > 1) {
    auto *agreed = reinterpret_cast<float *>(updateCheck_.bytes() + sizeof(double));
    DMUON_RETURN_IF_ERROR(device_->upload(agreed, &firstBad, sizeof firstBad));
    RequestId id;
    DMUON_RETURN_IF_ERROR(backend_->allReduceMax(Communicator::World, agreed, 1, id));
    DMUON_RETURN_IF_ERROR(backend_->wait(id));
    DMUON_RETURN_IF_ERROR(device_->download(&firstBad, agreed, sizeof firstBad));
  }
  if (firstBad == 0)
    return Status::ok();
  const ParamRt &bad = params_[static_cast<size_t>(firstBad) - 1];
  return Status(DMUON_ERROR_NON_FINITE,
                "step: the update made param '" + bad.name +
                    "' NaN or Inf although every gradient was finite (an fp32 overflow: "
                    "check its values and the learning rate); the params are no longer usable, "
                    "load a checkpoint");
}

void Executor::endStep() {
  hooks_.endStep();
  backwardFinished_ = gradientsMeasured_ = false;
  inMicroBatch_ = false;
  microBatchesLastStep_ = std::max(1, microBatches_);
  microBatches_ = 0;
  currentLast_ = true;
}

Status Executor::synchronize() { return hooks_.synchronize(); }

} // namespace dmuon::rt
