#include "core/Executor.h"

#include "plan/PlanFile.h"

#include <cmath>
#include <cstring>

namespace dmuon::rt {

namespace {

namespace fbp = dmuon::plan;

double pick(double override, double planValue) {
  return std::isnan(override) ? planValue : override;
}

std::string groupLabel(const std::string &name, int g) {
  return "hook group " + std::to_string(g) + " ('" + name + "')";
}

} // namespace

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

Status Executor::init(const LoadedPlan &plan, const dmuon_runtime_options_t &o) {
  plan_ = &plan;
  const fbp::Plan &root = plan.root();
  const fbp::Mesh &mesh = *root.mesh();

  // Options: the plan's defaults unless the host overrides them.
  if (!root.options())
    return {DMUON_ERROR_INVALID_PLAN, "the plan has no options table"};
  const fbp::Options &popts = *root.options();
  const fbp::OptimizerDefaults *od = popts.optimizer();
  planZ3_ = popts.mode() == fbp::Mode::z3;
  z3_ = o.mode == DMUON_MODE_FROM_PLAN ? planZ3_ : o.mode == DMUON_MODE_Z3;
  replicateAsync_ = o.replicate_async < 0 ? popts.replicate_async() : o.replicate_async != 0;
  manageAdamW_ = o.manage_adamw != 0;
  muon_.lr = static_cast<float>(pick(o.lr, od ? od->lr() : 0.02));
  muon_.momentum = static_cast<float>(pick(o.momentum, od ? od->momentum() : 0.95));
  muon_.weightDecay = static_cast<float>(pick(o.weight_decay, od ? od->weight_decay() : 0.0));
  muon_.nesterov = o.nesterov < 0 ? (od ? od->nesterov() : true) : o.nesterov != 0;
  planNsSteps_ = od ? od->ns_steps() : 5;
  muon_.nsSteps = o.ns_steps < 0 ? planNsSteps_ : o.ns_steps;
  muon_.matchRmsAdamW = od && od->lr_scale() == fbp::LrScale::match_rms_adamw;
  muon_.coefficients = od && od->ns_coefficients() == fbp::NsCoefficients::polar_express
                           ? kernels::NsCoefficients::PolarExpress
                           : kernels::NsCoefficients::Original;
  adamw_.lr = static_cast<float>(pick(o.adamw_lr, od ? od->adamw_lr() : 1e-3));
  adamw_.beta1 = static_cast<float>(pick(o.adamw_beta1, od ? od->adamw_beta1() : 0.9));
  adamw_.beta2 = static_cast<float>(pick(o.adamw_beta2, od ? od->adamw_beta2() : 0.999));
  adamw_.eps = static_cast<float>(pick(o.adamw_eps, od ? od->adamw_eps() : 1e-8));
  adamw_.weightDecay =
      static_cast<float>(pick(o.adamw_weight_decay, od ? od->adamw_weight_decay() : 0.0));
  Status local = Status::ok();
  if (muon_.nsSteps < 1 || muon_.nsSteps > 100)
    local = invalidArgument("ns_steps=" + std::to_string(muon_.nsSteps) +
                            " must be between 1 and 100");


  // Agree first, decide after: every rank sees every rank's fingerprint,
  // world size, options and verdict on them before any collective that
  // needs all ranks, so all ranks fail (or succeed) together instead of some
  // waiting forever in a collective the others skipped.
  std::vector<uint64_t> fingerprints, worlds, verdicts, settings;
  DMUON_RETURN_IF_ERROR(backend_->allGather(plan.fingerprint(), fingerprints));
  DMUON_RETURN_IF_ERROR(backend_->allGather(static_cast<uint64_t>(mesh.world_size()), worlds));
  DMUON_RETURN_IF_ERROR(backend_->allGather(static_cast<uint64_t>(local.code()), verdicts));
  DMUON_RETURN_IF_ERROR(backend_->allGather(optionsHash(), settings));
  rank_ = backend_->worldRank();
  const int world = backend_->worldSize();
  DMUON_RETURN_IF_ERROR(local);
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

  // Plans the runtime cannot execute yet are refused, never mis-executed.
  for (int i = 0; i < plan.numParams(); ++i) {
    const fbp::Param &p = plan.param(i);
    const auto *pls = p.placements();
    for (flatbuffers::uoffset_t d = 0; pls && d < pls->size(); ++d) {
      const fbp::Placement &pl = *pls->Get(d);
      if (pl.kind() == fbp::PlacementKind::partial)
        return unsupported("param '" + p.name()->str() + "' is Partial on mesh dim '" +
                           mesh.dims()->Get(d)->name()->str() +
                           "'; Partial placements are not supported yet");
      if (p.role() == fbp::Role::muon && p.group() == fbp::ShardingGroupKind::comm &&
          pl.kind() == fbp::PlacementKind::strided_shard)
        return unsupported("Muon param '" + p.name()->str() +
                           "' is StridedShard on a matrix dim; not supported yet");
    }
    if (p.role() == fbp::Role::muon && p.group() == fbp::ShardingGroupKind::comm && pls) {
      // One gather along one tensor dim reassembles the matrix only when a
      // single mesh dim shards its matrix dims.
      const int ndim = static_cast<int>(p.shape()->size());
      int matrixShards = 0;
      for (const fbp::Placement *pl : *pls)
        if ((pl->kind() == fbp::PlacementKind::shard ||
             pl->kind() == fbp::PlacementKind::strided_shard) &&
            (p.conv() || pl->dim() >= ndim - 2))
          ++matrixShards;
      if (matrixShards > 1)
        return unsupported("Muon param '" + p.name()->str() +
                           "' has its matrix dims sharded by more than one mesh dim; not "
                           "supported yet");
    }
    if (p.role() == fbp::Role::muon && p.group() == fbp::ShardingGroupKind::comm &&
        (p.gather_mesh_dim() < 0 || p.compute_index() < 0))
      return unsupported("Muon param '" + p.name()->str() +
                         "' is sharded on a matrix dim but the plan names no gather group; "
                         "recompile it with this dmuonc (not supported yet otherwise)");
    if (p.role() == fbp::Role::muon && p.dtype() != fbp::DType::f32 &&
        p.dtype() != fbp::DType::bf16)
      return unsupported("Muon param '" + p.name()->str() + "' has dtype " +
                         fbp::EnumNameDType(p.dtype()) +
                         "; packed buffers support f32 and bf16");
  }

  G_ = mesh.num_shards();
  R_ = mesh.num_replicas();
  // This rank's coordinate, row-major over the mesh dims.
  const auto *dims = mesh.dims();
  std::vector<int> coord(dims->size());
  for (int d = static_cast<int>(dims->size()) - 1, rem = rank_; d >= 0; --d) {
    coord[d] = rem % dims->Get(d)->size();
    rem /= dims->Get(d)->size();
  }
  auto rankOf = [&](const std::vector<int> &c) {
    int r = 0;
    for (size_t d = 0; d < c.size(); ++d)
      r = r * dims->Get(d)->size() + c[d];
    return r;
  };
  s_ = mesh.shard_dim() >= 0 ? coord[mesh.shard_dim()] : 0;
  r_ = mesh.replicate_dim() >= 0 ? coord[mesh.replicate_dim()] : 0;
  auto withOwnership = [&](int s, int r) {
    std::vector<int> c = coord;
    if (mesh.shard_dim() >= 0)
      c[mesh.shard_dim()] = s;
    if (mesh.replicate_dim() >= 0)
      c[mesh.replicate_dim()] = r;
    return rankOf(c);
  };
  DMUON_RETURN_IF_ERROR(backend_->createGroups({withOwnership(0, r_), s_},
                                               {withOwnership(s_, 0), r_},
                                               {withOwnership(0, 0), r_ * G_ + s_}));

  // Params, hook groups and segments, from the plan's layout.
  // One communicator per model-parallel mesh dim that gathers matrices.
  std::vector<CommGroup> gatherGroups(dims->size(), CommGroup::World);
  for (int i = 0; i < plan.numParams(); ++i) {
    int d = plan.param(i).gather_mesh_dim();
    if (plan.param(i).role() != fbp::Role::muon || d < 0 || gatherGroups[d] != CommGroup::World)
      continue;
    std::vector<int> c0 = coord;
    c0[d] = 0;
    DMUON_RETURN_IF_ERROR(backend_->createGroup({rankOf(c0), coord[d]}, gatherGroups[d]));
  }

  const auto *units = root.units();
  params_.resize(plan.numParams());
  size_t adamwElements = 0; // adamw grads share one buffer: one all-reduce
  for (int i = 0; i < plan.numParams(); ++i) {
    const fbp::Param &pp = plan.param(i);
    ParamRt &p = params_[i];
    p.plan = &pp;
    p.name = pp.name()->str();
    p.muon = pp.role() == fbp::Role::muon;
    // A model-parallel param is held as this rank's local shard.
    const auto *shape = pp.local_shape() && pp.local_shape()->size() ? pp.local_shape() : pp.shape();
    p.numel = 1;
    for (int64_t d : *shape)
      p.numel *= d;
    p.localBatch = pp.local_shape() && pp.local_shape()->size() ? pp.local_batch() : pp.batch();
    p.localRows = pp.local_shape() && pp.local_shape()->size() ? pp.local_rows() : pp.rows();
    p.localCols = pp.local_shape() && pp.local_shape()->size() ? pp.local_cols() : pp.cols();
    if (p.muon && pp.group() == fbp::ShardingGroupKind::comm) {
      const int d = pp.gather_mesh_dim(), td = pp.gather_tensor_dim();
      p.comm = true;
      p.gatherGroup = gatherGroups[d];
      p.gatherSize = dims->Get(d)->size();
      p.gatherCoord = coord[d];
      p.computeIndex = pp.compute_index();
      for (int k = 0; k < static_cast<int>(shape->size()); ++k) {
        if (k < td)
          p.concatOuter *= shape->Get(k);
        else if (k > td)
          p.concatInner *= shape->Get(k);
      }
      p.concatLocal = shape->Get(td);
    }
    if (p.muon) {
      int slot = units->Get(pp.unit())->slot();
      p.so = slot % G_;
      p.ro = slot / G_;
      p.group = pp.hook_group();
      p.keepsMaster = p.so == s_;
      p.isOwner = p.keepsMaster && p.ro == r_;
    } else {
      p.gradOffset = adamwElements;
      adamwElements += static_cast<size_t>(p.numel);
      adamwParams_.push_back(i);
    }
  }
  // NS scratch sized once for the largest matrix this rank orthogonalizes.
  int64_t big = 0, bigBatch = 1, bigRows = 0, bigCols = 0;
  for (const ParamRt &p : params_) {
    if (!p.isOwner)
      continue;
    const int64_t rows = p.comm ? p.plan->rows() : p.localRows;
    const int64_t cols = p.comm ? p.plan->cols() : p.localCols;
    if (p.localBatch * rows * cols > big) {
      big = p.localBatch * rows * cols;
      bigBatch = p.localBatch;
      bigRows = rows;
      bigCols = cols;
    }
  }
  if (big > 0)
    DMUON_RETURN_IF_ERROR(device_->reserve(bigBatch, bigRows, bigCols));
  adamwElements_ = adamwElements;
  DMUON_RETURN_IF_ERROR(adamwGrad_.allocate(*device_, adamwElements * sizeof(float)));

  const auto *hgs = root.hook_groups();
  groups_.resize(hgs ? hgs->size() : 0);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const fbp::HookGroup &hg = *hgs->Get(static_cast<flatbuffers::uoffset_t>(g));
    GroupRt &grp = groups_[g];
    grp.name = hg.name()->str();
    grp.bufferBytes = hg.buffer_bytes();
    grp.reduceBufferBytes = hg.reduce_buffer_bytes();
    for (const fbp::Segment *sp : *hg.segments()) {
      SegmentRt seg;
      seg.so = sp->owner_shard();
      seg.ro = sp->owner_replicate();
      seg.offset = sp->offset();
      seg.bytes = sp->bytes();
      seg.reduceOffset = sp->reduce_offset();
      seg.reduceBytes = sp->reduce_bytes();
      for (int pi : *sp->params()) {
        seg.params.push_back(pi);
        seg.masterElements += params_[pi].numel;
      }
      grp.segments.push_back(std::move(seg));
    }
  }
  return Status::ok();
}

uint64_t Executor::optionsHash() const {
  std::string b;
  auto put = [&b](const auto &v) { b.append(reinterpret_cast<const char *>(&v), sizeof v); };
  put(z3_), put(replicateAsync_), put(manageAdamW_), put(muon_.lr), put(muon_.momentum);
  put(muon_.weightDecay), put(muon_.nesterov), put(muon_.matchRmsAdamW), put(muon_.coefficients);
  put(muon_.nsSteps), put(adamw_.lr), put(adamw_.beta1), put(adamw_.beta2), put(adamw_.eps);
  put(adamw_.weightDecay);
  return planfile::fnv1a64(reinterpret_cast<const uint8_t *>(b.data()), b.size());
}

Status Executor::findParam(const std::string &name, int &index) const {
  index = plan_->findParam(name);
  if (index < 0)
    return invalidArgument("the plan has no param named '" + name + "'");
  return Status::ok();
}

Status Executor::checkGroup(int g, const char *call) const {
  if (g < 0 || g >= static_cast<int>(groups_.size()))
    return invalidArgument(std::string(call) + ": hook group " + std::to_string(g) +
                           " is out of range (the plan has " + std::to_string(groups_.size()) +
                           ")");
  return Status::ok();
}

void Executor::count(dmuon_collective_t kind, uint64_t sent, uint64_t received) {
  counters_.sent[kind] += sent;
  counters_.received[kind] += received;
  counters_.calls[kind] += 1;
}

// ---------------------------------------------------------------- binding

Status Executor::bindParam(const std::string &name, const float *values, int64_t numel) {
  int i;
  DMUON_RETURN_IF_ERROR(findParam(name, i));
  ParamRt &p = params_[i];
  if (!values)
    return invalidArgument("bind_param('" + name + "'): values is null");
  if (numel != p.numel)
    return invalidArgument("bind_param('" + name + "'): got " + std::to_string(numel) +
                           " values but the plan's shape has " + std::to_string(p.numel));
  if (started_)
    return invalidState("bind_param('" + name + "') after training started");
  // Everything is allocated before anything is replaced, so a failed bind
  // leaves the param as it was.
  const size_t bytes = static_cast<size_t>(numel) * sizeof(float);
  if (p.muon) {
    // I2: the owner's whole shard column keeps the fp32 master; others nothing.
    DeviceArray master, momentum;
    if (p.keepsMaster) {
      DMUON_RETURN_IF_ERROR(master.allocate(*device_, bytes));
      DMUON_RETURN_IF_ERROR(device_->upload(master.bytes(), values, bytes));
    }
    if (p.isOwner)
      DMUON_RETURN_IF_ERROR(momentum.allocate(*device_, bytes));
    p.master = std::move(master);
    p.momentum = std::move(momentum);
  } else {
    DeviceArray value, m, v;
    DMUON_RETURN_IF_ERROR(value.allocate(*device_, bytes));
    DMUON_RETURN_IF_ERROR(device_->upload(value.bytes(), values, bytes));
    DMUON_RETURN_IF_ERROR(m.allocate(*device_, bytes));
    DMUON_RETURN_IF_ERROR(v.allocate(*device_, bytes));
    p.value = std::move(value);
    p.adamM = std::move(m);
    p.adamV = std::move(v);
  }
  p.bound = true;
  return Status::ok();
}

Status Executor::paramView(const std::string &name, void **out) {
  int i;
  DMUON_RETURN_IF_ERROR(findParam(name, i));
  ParamRt &p = params_[i];
  if (!p.muon) {
    if (!p.bound)
      return invalidState("param '" + name + "' is not bound yet");
    *out = p.value.bytes();
    return Status::ok();
  }
  GroupRt &grp = groups_[p.group];
  if (grp.state != Unshard::Unsharded)
    return invalidState("param '" + name + "' is not unsharded: its " +
                        groupLabel(grp.name, p.group) +
                        " is between hooks (call pre_forward or pre_backward first)");
  *out = grp.packed.bytes() + p.plan->offset();
  return Status::ok();
}

Status Executor::gradView(const std::string &name, float **out) {
  int i;
  DMUON_RETURN_IF_ERROR(findParam(name, i));
  ParamRt &p = params_[i];
  if (!p.muon) {
    *out = adamwGrad_.floats() + p.gradOffset;
    return Status::ok();
  }
  GroupRt &grp = groups_[p.group];
  if (!grp.grad.live())
    return invalidState("no gradient buffer for param '" + name + "': its " +
                        groupLabel(grp.name, p.group) +
                        " is not between pre_backward and post_backward");
  *out = reinterpret_cast<float *>(grp.grad.bytes() + p.plan->reduce_offset());
  return Status::ok();
}

// ---------------------------------------------------------------- unshard

Status Executor::pack(const SegmentRt &seg, uint8_t *dst) {
  for (int i : seg.params) {
    const ParamRt &p = params_[i];
    const PackedType type =
        p.plan->dtype() == fbp::DType::bf16 ? PackedType::BF16 : PackedType::F32;
    DMUON_RETURN_IF_ERROR(
        device_->packCast(dst + p.plan->offset(), type, p.master.floats(), p.numel));
  }
  return Status::ok();
}

Status Executor::waitReplicate(int g) {
  GroupRt &grp = groups_[g];
  for (PendingReplicate &pr : grp.replicate) {
    DMUON_RETURN_IF_ERROR(backend_->wait(pr.request));
    const SegmentRt &seg = grp.segments[pr.segment];
    if (r_ == seg.ro)
      continue; // the global owner sent it
    size_t off = 0;
    for (int i : seg.params) {
      ParamRt &p = params_[i];
      DMUON_RETURN_IF_ERROR(device_->copy(p.master.bytes(), pr.staging.floats() + off,
                                          p.numel * sizeof(float)));
      off += static_cast<size_t>(p.numel);
    }
  }
  grp.replicate.clear();
  return Status::ok();
}

Status Executor::unshard(int g) {
  GroupRt &grp = groups_[g];
  if (grp.state != Unshard::Sharded)
    return Status::ok();
  // The packed data comes from owned data the last step's replicate
  // broadcast may still be writing.
  DMUON_RETURN_IF_ERROR(waitReplicate(g));
  DMUON_RETURN_IF_ERROR(grp.packed.allocate(*device_, static_cast<size_t>(grp.bufferBytes)));
  // One broadcast per owner, coalesced.
  CollectiveGroup coalesced(*backend_);
  DMUON_RETURN_IF_ERROR(coalesced.opened());
  for (const SegmentRt &seg : grp.segments) {
    if (seg.so == s_)
      DMUON_RETURN_IF_ERROR(pack(seg, grp.packed.bytes()));
    if (G_ == 1)
      continue;
    RequestId id;
    DMUON_RETURN_IF_ERROR(backend_->broadcast(CommGroup::Shard, grp.packed.bytes() + seg.offset,
                                              static_cast<size_t>(seg.bytes), seg.so, id));
    grp.broadcasts.push_back(id);
    const uint64_t b = static_cast<uint64_t>(seg.bytes);
    if (seg.so == s_)
      count(DMUON_COLLECTIVE_BROADCAST, (G_ - 1) * b, 0);
    else
      count(DMUON_COLLECTIVE_BROADCAST, 0, b);
  }
  grp.state = Unshard::InFlight;
  return coalesced.close();
}

Status Executor::waitUnshard(int g) {
  GroupRt &grp = groups_[g];
  for (RequestId id : grp.broadcasts)
    DMUON_RETURN_IF_ERROR(backend_->wait(id));
  grp.broadcasts.clear();
  if (grp.state == Unshard::InFlight)
    grp.state = Unshard::Unsharded;
  return Status::ok();
}

void Executor::reshard(int g) {
  GroupRt &grp = groups_[g];
  grp.packed.release();
  grp.state = Unshard::Sharded;
}

// ------------------------------------------------------------------ hooks

Status Executor::preForward(int g) {
  DMUON_RETURN_IF_ERROR(checkGroup(g, "pre_forward"));
  GroupRt &grp = groups_[g];
  if (!allBound_) {
    for (const ParamRt &p : params_)
      if (!p.bound)
        return invalidState("pre_forward: param '" + p.name +
                            "' is not bound (bind every param first)");
    allBound_ = true;
  }
  if (grp.forwardStarted)
    return invalidState("pre_forward(" + std::to_string(g) + ") called twice in one step for " +
                        groupLabel(grp.name, g) + "; call step() between steps");
  for (size_t h = 0; h < groups_.size(); ++h)
    if (groups_[h].backwardStarted)
      return invalidState("pre_forward(" + std::to_string(g) +
                          ") after backward started; call step() first");
  DMUON_RETURN_IF_ERROR(unshard(g));
  started_ = true;
  grp.forwardStarted = true;
  // Forward prefetch: the next group's broadcast overlaps this one's compute.
  if (g + 1 < static_cast<int>(groups_.size()) && !groups_[g + 1].forwardStarted)
    DMUON_RETURN_IF_ERROR(unshard(g + 1));
  return waitUnshard(g);
}

Status Executor::postForward(int g) {
  DMUON_RETURN_IF_ERROR(checkGroup(g, "post_forward"));
  GroupRt &grp = groups_[g];
  if (!grp.forwardStarted || grp.forwardDone)
    return invalidState("post_forward(" + std::to_string(g) + ") without a matching pre_forward");
  grp.forwardDone = true;
  if (z3_)
    reshard(g);
  return Status::ok();
}

Status Executor::preBackward(int g) {
  DMUON_RETURN_IF_ERROR(checkGroup(g, "pre_backward"));
  GroupRt &grp = groups_[g];
  if (!grp.forwardDone)
    return invalidState("pre_backward(" + std::to_string(g) + ") before post_forward of " +
                        groupLabel(grp.name, g));
  if (grp.backwardStarted)
    return invalidState("pre_backward(" + std::to_string(g) + ") called twice in one step");
  grp.backwardStarted = true;
  DMUON_RETURN_IF_ERROR(unshard(g)); // Z3 re-broadcasts; Z2 kept the buffer
  DMUON_RETURN_IF_ERROR(waitUnshard(g));
  return grp.grad.allocate(*device_, static_cast<size_t>(grp.reduceBufferBytes));
}

Status Executor::postBackward(int g) {
  DMUON_RETURN_IF_ERROR(checkGroup(g, "post_backward"));
  GroupRt &grp = groups_[g];
  if (!grp.backwardStarted || grp.backwardDone)
    return invalidState("post_backward(" + std::to_string(g) +
                        ") without a matching pre_backward");
  // Phase 1: average over the shard group onto the row's shard owner.
  if (G_ > 1) {
    CollectiveGroup coalesced(*backend_);
    DMUON_RETURN_IF_ERROR(coalesced.opened());
    for (const SegmentRt &seg : grp.segments) {
      RequestId id;
      DMUON_RETURN_IF_ERROR(backend_->reduceSum(
          CommGroup::Shard, reinterpret_cast<float *>(grp.grad.bytes() + seg.reduceOffset),
          static_cast<size_t>(seg.reduceBytes / 4), seg.so, id));
      grp.phase1.push_back(id);
      const uint64_t b = static_cast<uint64_t>(seg.reduceBytes);
      if (seg.so == s_)
        count(DMUON_COLLECTIVE_REDUCE, 0, (G_ - 1) * b);
      else
        count(DMUON_COLLECTIVE_REDUCE, b, 0);
    }
    DMUON_RETURN_IF_ERROR(coalesced.close());
  }
  reshard(g);
  grp.backwardDone = true;
  // Phase 2 of the groups before this one overlaps this group's phase 1; the
  // order of issue is the same on every rank, as MPI requires.
  while (!phase2Queue_.empty()) {
    int q = phase2Queue_.front();
    phase2Queue_.pop_front();
    DMUON_RETURN_IF_ERROR(issuePhase2(q));
  }
  phase2Queue_.push_back(g);
  return Status::ok();
}

Status Executor::issuePhase2(int g) {
  GroupRt &grp = groups_[g];
  for (RequestId id : grp.phase1)
    DMUON_RETURN_IF_ERROR(backend_->wait(id));
  grp.phase1.clear();
  if (R_ == 1)
    return Status::ok();
  // Phase 2: down the owner's shard column onto the global owner.
  CollectiveGroup coalesced(*backend_);
  DMUON_RETURN_IF_ERROR(coalesced.opened());
  for (const SegmentRt &seg : grp.segments) {
    if (seg.so != s_)
      continue;
    RequestId id;
    DMUON_RETURN_IF_ERROR(backend_->reduceSum(
        CommGroup::Replicate, reinterpret_cast<float *>(grp.grad.bytes() + seg.reduceOffset),
        static_cast<size_t>(seg.reduceBytes / 4), seg.ro, id));
    grp.phase2.push_back(id);
    const uint64_t b = static_cast<uint64_t>(seg.reduceBytes);
    if (seg.ro == r_)
      count(DMUON_COLLECTIVE_REDUCE, 0, (R_ - 1) * b);
    else
      count(DMUON_COLLECTIVE_REDUCE, b, 0);
  }
  return coalesced.close();
}

Status Executor::finishBackward() {
  if (backwardFinished_)
    return Status::ok();
  for (size_t g = 0; g < groups_.size(); ++g)
    if (!groups_[g].backwardDone)
      return invalidState("finish_backward before post_backward of " +
                          groupLabel(groups_[g].name, static_cast<int>(g)));
  while (!phase2Queue_.empty()) {
    int q = phase2Queue_.front();
    phase2Queue_.pop_front();
    DMUON_RETURN_IF_ERROR(issuePhase2(q));
  }
  const float scale = 1.0f / static_cast<float>(G_ * R_); // net divisor G*R: AVG
  for (GroupRt &grp : groups_) {
    for (RequestId id : grp.phase2)
      DMUON_RETURN_IF_ERROR(backend_->wait(id));
    grp.phase2.clear();
    for (const SegmentRt &seg : grp.segments) {
      if (seg.so != s_ || seg.ro != r_)
        continue;
      for (int i : seg.params) {
        ParamRt &p = params_[i];
        const float *src =
            reinterpret_cast<const float *>(grp.grad.bytes() + p.plan->reduce_offset());
        DMUON_RETURN_IF_ERROR(p.reducedGrad.allocate(*device_, p.numel * sizeof(float)));
        DMUON_RETURN_IF_ERROR(device_->scaleCopy(p.reducedGrad.floats(), src, scale, p.numel));
      }
    }
    grp.grad.release(); // I3: only the global owner keeps a reduced gradient
  }
  backwardFinished_ = true;
  return Status::ok();
}

// ------------------------------------------------------------------- step

Status Executor::step() {
  if (!started_)
    return invalidState("step before any forward/backward (call the hooks first)");
  DMUON_RETURN_IF_ERROR(finishBackward());
  for (ParamRt &p : params_) {
    if (!p.isOwner)
      continue;
    const fbp::Param &pp = *p.plan;
    if (p.comm) {
      DMUON_RETURN_IF_ERROR(stepGathered(p));
    } else {
      DMUON_RETURN_IF_ERROR(device_->muonStep(p.master.floats(), p.momentum.floats(),
                                              p.reducedGrad.floats(), p.localBatch, p.localRows,
                                              p.localCols, muon_));
    }
    if (!p.comm || p.gatherCoord == p.computeIndex)
      nsFlops_ += pp.cost() / planNsSteps_ * muon_.nsSteps; // the plan prices its ns_steps
    p.reducedGrad.release();
  }
  DMUON_RETURN_IF_ERROR(broadcastReplicas());
  if (manageAdamW_)
    DMUON_RETURN_IF_ERROR(stepAdamW());
  else // the documented contract: adamw gradients start each step at zero
    DMUON_RETURN_IF_ERROR(device_->zero(adamwGrad_.bytes(), adamwElements_ * sizeof(float)));
  for (GroupRt &grp : groups_) {
    grp.forwardStarted = grp.forwardDone = false;
    grp.backwardStarted = grp.backwardDone = false;
    if (!grp.packed.live())
      grp.state = Unshard::Sharded;
  }
  // Z2 kept the buffers through backward; post_backward freed them.
  backwardFinished_ = false;
  return Status::ok();
}

// A matrix sharded on a matrix dim over a model-parallel group: every owner
// shard forms its momentum input, the group gathers it onto the rank the plan
// chose, that rank runs NS on the whole matrix, and each shard gets its slice
// of the result back.
Status Executor::stepGathered(ParamRt &p) {
  const size_t local = static_cast<size_t>(p.numel), bytes = local * sizeof(float);
  const int K = p.gatherSize;
  const bool computes = p.gatherCoord == p.computeIndex;
  // Scratch kept across steps, grown to the largest gathered matrix.
  auto ensure = [&](DeviceArray &a, size_t need) -> Status {
    return a.size() >= need ? Status::ok() : a.allocate(*device_, need);
  };
  DeviceArray &u = gatherScratch_[0], &ortho = gatherScratch_[1], &chunks = gatherScratch_[2],
              &full = gatherScratch_[3];
  DMUON_RETURN_IF_ERROR(ensure(u, bytes));
  DMUON_RETURN_IF_ERROR(ensure(ortho, bytes));
  DMUON_RETURN_IF_ERROR(
      device_->muonMomentum(p.momentum.floats(), p.reducedGrad.floats(), u.floats(), p.numel, muon_));
  if (computes) {
    DMUON_RETURN_IF_ERROR(ensure(chunks, bytes * K));
    DMUON_RETURN_IF_ERROR(ensure(full, bytes * K));
  }
  RequestId id;
  DMUON_RETURN_IF_ERROR(
      backend_->gather(p.gatherGroup, u.floats(), chunks.floats(), local, p.computeIndex, id));
  DMUON_RETURN_IF_ERROR(backend_->wait(id));
  // Chunk k is the local tensor of coordinate k; the whole tensor is their
  // concatenation along the gathered tensor dim.
  const size_t row = static_cast<size_t>(p.concatLocal * p.concatInner) * sizeof(float);
  const size_t height = static_cast<size_t>(p.concatOuter);
  if (computes) {
    for (int k = 0; k < K; ++k)
      DMUON_RETURN_IF_ERROR(device_->copy2D(full.bytes() + k * row, row * K,
                                            chunks.bytes() + k * bytes, row, row, height));
    const fbp::Param &pp = *p.plan;
    DMUON_RETURN_IF_ERROR(device_->newtonSchulz(full.floats(), p.localBatch, pp.rows(), pp.cols(),
                                                muon_));
    for (int k = 0; k < K; ++k)
      DMUON_RETURN_IF_ERROR(device_->copy2D(chunks.bytes() + k * bytes, row,
                                            full.bytes() + k * row, row * K, row, height));
    count(DMUON_COLLECTIVE_GATHER, 0, (K - 1) * bytes);
    count(DMUON_COLLECTIVE_SCATTER, (K - 1) * bytes, 0);
  } else {
    count(DMUON_COLLECTIVE_GATHER, bytes, 0);
    count(DMUON_COLLECTIVE_SCATTER, 0, bytes);
  }
  DMUON_RETURN_IF_ERROR(
      backend_->scatter(p.gatherGroup, chunks.floats(), ortho.floats(), local, p.computeIndex, id));
  DMUON_RETURN_IF_ERROR(backend_->wait(id));
  return device_->muonApply(p.master.floats(), ortho.floats(), p.numel, p.plan->rows(),
                            p.plan->cols(), muon_);
}

Status Executor::broadcastReplicas() {
  if (R_ == 1)
    return Status::ok();
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupRt &grp = groups_[g];
    CollectiveGroup coalesced(*backend_);
    DMUON_RETURN_IF_ERROR(coalesced.opened());
    for (size_t si = 0; si < grp.segments.size(); ++si) {
      const SegmentRt &seg = grp.segments[si];
      if (seg.so != s_)
        continue;
      PendingReplicate pr;
      pr.segment = static_cast<int>(si);
      const size_t bytes = static_cast<size_t>(seg.masterElements) * sizeof(float);
      DMUON_RETURN_IF_ERROR(pr.staging.allocate(*device_, bytes));
      if (seg.ro == r_) {
        size_t off = 0;
        for (int i : seg.params) {
          const ParamRt &p = params_[i];
          DMUON_RETURN_IF_ERROR(device_->copy(pr.staging.floats() + off, p.master.bytes(),
                                              p.numel * sizeof(float)));
          off += static_cast<size_t>(p.numel);
        }
      }
      DMUON_RETURN_IF_ERROR(backend_->broadcast(CommGroup::Replicate, pr.staging.bytes(), bytes,
                                                seg.ro, pr.request));
      if (seg.ro == r_)
        count(DMUON_COLLECTIVE_REPLICATE, (R_ - 1) * bytes, 0);
      else
        count(DMUON_COLLECTIVE_REPLICATE, 0, bytes);
      grp.replicate.push_back(std::move(pr));
    }
    DMUON_RETURN_IF_ERROR(coalesced.close());
    // Sync mode waits here; async leaves it to the next pre_forward.
    if (!replicateAsync_)
      DMUON_RETURN_IF_ERROR(waitReplicate(static_cast<int>(g)));
  }
  return Status::ok();
}

Status Executor::stepAdamW() {
  if (adamwParams_.empty())
    return Status::ok();
  ++adamwStep_;
  if (G_ * R_ > 1) {
    RequestId id;
    DMUON_RETURN_IF_ERROR(backend_->allReduceSum(CommGroup::DataParallel, adamwGrad_.floats(),
                                                 adamwElements_, id));
    DMUON_RETURN_IF_ERROR(backend_->wait(id));
    const uint64_t b = adamwElements_ * sizeof(float);
    count(DMUON_COLLECTIVE_ALLREDUCE, b, b);
    DMUON_RETURN_IF_ERROR(device_->scaleCopy(adamwGrad_.floats(), adamwGrad_.floats(),
                                             1.0f / static_cast<float>(G_ * R_),
                                             static_cast<int64_t>(adamwElements_)));
  }
  for (int i : adamwParams_) {
    ParamRt &p = params_[i];
    DMUON_RETURN_IF_ERROR(device_->adamwStep(p.value.floats(), p.adamM.floats(),
                                             p.adamV.floats(), adamwGrad_.floats() + p.gradOffset,
                                             p.numel, adamwStep_, adamw_));
  }
  return device_->zero(adamwGrad_.bytes(), adamwElements_ * sizeof(float));
}

Status Executor::synchronize() {
  for (size_t g = 0; g < groups_.size(); ++g) {
    DMUON_RETURN_IF_ERROR(waitUnshard(static_cast<int>(g)));
    DMUON_RETURN_IF_ERROR(waitReplicate(static_cast<int>(g)));
  }
  return Status::ok();
}

// ---------------------------------------------------------- introspection

Status Executor::gatherParam(const std::string &name, float *out, int64_t numel) {
  int i;
  DMUON_RETURN_IF_ERROR(findParam(name, i));
  ParamRt &p = params_[i];
  if (!out)
    return invalidArgument("gather_param('" + name + "'): out is null");
  if (numel != p.numel)
    return invalidArgument("gather_param('" + name + "'): buffer holds " + std::to_string(numel) +
                           " values but the param has " + std::to_string(p.numel));
  if (!p.bound)
    return invalidState("gather_param('" + name + "'): param is not bound");
  const size_t bytes = static_cast<size_t>(p.numel) * sizeof(float);
  if (!p.muon)
    return device_->download(out, p.value.bytes(), bytes);
  // The global owner's master, broadcast over the data-parallel group in a
  // temporary device buffer (collectives work on device memory).
  DeviceArray tmp;
  DMUON_RETURN_IF_ERROR(tmp.allocate(*device_, bytes));
  if (p.isOwner)
    DMUON_RETURN_IF_ERROR(device_->copy(tmp.bytes(), p.master.bytes(), bytes));
  RequestId id;
  DMUON_RETURN_IF_ERROR(
      backend_->broadcast(CommGroup::DataParallel, tmp.bytes(), bytes, p.ro * G_ + p.so, id));
  DMUON_RETURN_IF_ERROR(backend_->wait(id));
  return device_->download(out, tmp.bytes(), bytes);
}

Status Executor::paramState(const std::string &name, dmuon_param_state_t &out) const {
  int i;
  DMUON_RETURN_IF_ERROR(findParam(name, i));
  const ParamRt &p = params_[i];
  out = {};
  out.is_owner = p.isOwner;
  out.has_owned_data = p.master.live();
  out.has_reduced_grad = p.reducedGrad.live();
  out.has_momentum = p.momentum.live();
  if (p.master.live()) {
    std::vector<uint8_t> host(static_cast<size_t>(p.numel) * sizeof(float));
    DMUON_RETURN_IF_ERROR(device_->download(host.data(), p.master.bytes(), host.size()));
    out.owned_checksum = planfile::fnv1a64(host.data(), host.size());
  }
  return Status::ok();
}

dmuon_comm_counters_t Executor::plannedCounters() const {
  dmuon_comm_counters_t c{};
  const auto *ranks = plan_->root().stats()->ranks();
  const fbp::RankFigures *f = ranks->Get(static_cast<flatbuffers::uoffset_t>(rank_));
  // The plan prices its own mode; scale the unshard broadcasts to ours.
  const uint64_t planUnshards = planZ3_ ? 2 : 1, ourUnshards = z3_ ? 2 : 1;
  c.sent[DMUON_COLLECTIVE_BROADCAST] = f->broadcast_send_bytes() / planUnshards * ourUnshards;
  c.received[DMUON_COLLECTIVE_BROADCAST] = f->broadcast_recv_bytes() / planUnshards * ourUnshards;
  c.sent[DMUON_COLLECTIVE_REDUCE] = f->reduce_send_bytes();
  c.received[DMUON_COLLECTIVE_REDUCE] = f->reduce_recv_bytes();
  c.sent[DMUON_COLLECTIVE_REPLICATE] = f->replicate_send_bytes();
  c.received[DMUON_COLLECTIVE_REPLICATE] = f->replicate_recv_bytes();
  if (manageAdamW_) {
    c.sent[DMUON_COLLECTIVE_ALLREDUCE] = f->allreduce_bytes();
    c.received[DMUON_COLLECTIVE_ALLREDUCE] = f->allreduce_bytes();
  }
  c.sent[DMUON_COLLECTIVE_GATHER] = f->gather_send_bytes();
  c.received[DMUON_COLLECTIVE_GATHER] = f->gather_recv_bytes();
  c.sent[DMUON_COLLECTIVE_SCATTER] = f->scatter_send_bytes();
  c.received[DMUON_COLLECTIVE_SCATTER] = f->scatter_recv_bytes();
  return c;
}

} // namespace dmuon::rt
