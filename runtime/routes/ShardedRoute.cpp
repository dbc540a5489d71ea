#include "routes/ShardedRoute.h"

#include "optim/Optimizer.h"

namespace dmuon::rt {

namespace {

PackedType packedType(const ParamRt &p) {
  return p.plan->dtype() == plan::DType::bf16 ? PackedType::BF16 : PackedType::F32;
}

size_t elementBytes(const ParamRt &p) { return p.plan->dtype() == plan::DType::bf16 ? 2 : 4; }

} // namespace

Status ShardedRoute::init(const Context &ctx, std::vector<ParamRt> &params) {
  ctx_ = &ctx;
  params_ = &params;
  const auto *hooks = ctx.plan.root().hook_groups();
  members_.assign(hooks ? hooks->size() : 0, {});
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].route == plan::Route::sharded) {
      members_[static_cast<size_t>(params[i].group)].push_back(static_cast<int>(i));
      all_.push_back(static_cast<int>(i));
    }
  return Status::ok();
}

Status ShardedRoute::unshard(int g, uint8_t *packed, std::vector<RequestId> &requests) {
  const Topology &t = ctx_->topo;
  for (int i : members_[static_cast<size_t>(g)]) {
    const ParamRt &p = (*params_)[i];
    const size_t shardBytes = static_cast<size_t>(p.shard.elements) * elementBytes(p);
    uint8_t *base = packed + p.plan->offset();
    DMUON_RETURN_IF_ERROR(ctx_->device.packCast(base + static_cast<size_t>(t.s) * shardBytes,
                                                packedType(p), p.master.floats(),
                                                p.shard.elements));
    if (t.G == 1)
      continue;
    RequestId id;
    DMUON_RETURN_IF_ERROR(ctx_->backend.allGatherInPlace(Communicator::Shard, base, shardBytes, id));
    requests.push_back(id);
    const uint64_t moved = static_cast<uint64_t>(t.G - 1) * shardBytes;
    ctx_->counters.count(DMUON_COLLECTIVE_ALLGATHER, moved, moved);
  }
  return Status::ok();
}

// Phase 1: every gradient of group g summed over dp_shard onto its shards.
Status ShardedRoute::reduceShards(int g, uint8_t *grad, std::vector<RequestId> &requests) {
  const Topology &t = ctx_->topo;
  for (int i : members_[static_cast<size_t>(g)]) {
    const ParamRt &p = (*params_)[i];
    const auto *send = reinterpret_cast<const float *>(grad + p.plan->reduce_offset());
    auto *recv = reinterpret_cast<float *>(grad + p.plan->shard_offset());
    const size_t bytes = static_cast<size_t>(p.shard.elements) * sizeof(float);
    if (t.G == 1) {
      DMUON_RETURN_IF_ERROR(ctx_->device.copy(recv, send, bytes));
      continue;
    }
    RequestId id;
    DMUON_RETURN_IF_ERROR(ctx_->backend.reduceScatterSum(
        Communicator::Shard, send, recv, static_cast<size_t>(p.shard.elements), id));
    requests.push_back(id);
    const uint64_t moved = static_cast<uint64_t>(t.G - 1) * bytes;
    ctx_->counters.count(DMUON_COLLECTIVE_REDUCE_SCATTER, moved, moved);
  }
  return Status::ok();
}

// Phase 2: the shards summed over dp_replicate.
Status ShardedRoute::reduceReplicas(int g, uint8_t *grad, std::vector<RequestId> &requests) {
  if (ctx_->topo.R == 1)
    return Status::ok();
  for (int i : members_[static_cast<size_t>(g)]) {
    const ParamRt &p = (*params_)[i];
    RequestId id;
    DMUON_RETURN_IF_ERROR(ctx_->backend.allReduceSum(
        Communicator::Replicate, reinterpret_cast<float *>(grad + p.plan->shard_offset()),
        static_cast<size_t>(p.shard.elements), id));
    requests.push_back(id);
    const uint64_t bytes = static_cast<uint64_t>(p.shard.elements) * sizeof(float);
    ctx_->counters.count(DMUON_COLLECTIVE_ALLREDUCE, bytes, bytes);
  }
  return Status::ok();
}

Status ShardedRoute::collect(int g, const uint8_t *grad) {
  // AVG over every rank whose data met here, as the owner route's reduce.
  const float scale = 1.0f / static_cast<float>(ctx_->topo.dataParallelSize);
  for (int i : members_[static_cast<size_t>(g)]) {
    ParamRt &p = (*params_)[i];
    DMUON_RETURN_IF_ERROR(ctx_->device.scaleAdd(
        p.shard.grad.floats(), reinterpret_cast<const float *>(grad + p.plan->shard_offset()),
        scale, p.shard.elements));
  }
  return Status::ok();
}

// Counted as all-reduces. (The owner route's column spans those dims
// instead; the replicated route batches its all-reduces by dims.)
Status ShardedRoute::finishGradients() {
  for (int i : all_) {
    ParamRt &p = (*params_)[i];
    if (p.along.size <= 1)
      continue;
    RequestId id;
    const size_t count = static_cast<size_t>(p.shard.elements);
    DMUON_RETURN_IF_ERROR(
        ctx_->backend.allReduceSum(p.along.group, p.shard.grad.floats(), count, id));
    DMUON_RETURN_IF_ERROR(ctx_->backend.wait(id));
    const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(float);
    ctx_->counters.count(DMUON_COLLECTIVE_ALLREDUCE, bytes, bytes);
  }
  return Status::ok();
}

GradView ShardedRoute::averagedGrad(int index) {
  ParamRt &p = (*params_)[index];
  return {p.shard.grad.floats(), p.shard.elements}; // its padding is zero
}

Status ShardedRoute::step(int64_t adamwStep) {
  for (int i : all_) {
    ParamRt &p = (*params_)[i];
    // The padding past shardReal has zero values and gradients: it stays 0.
    DMUON_RETURN_IF_ERROR(
        p.optimizer->step(*ctx_, p, p.shard.grad.floats(), p.shard.elements, adamwStep));
  }
  return zeroGrads();
}

Status ShardedRoute::scaleGrads(float factor, bool) {
  for (int i : all_) {
    ParamRt &p = (*params_)[i];
    DMUON_RETURN_IF_ERROR(ctx_->device.scaleCopy(p.shard.grad.floats(), p.shard.grad.floats(),
                                                 factor, p.shard.elements));
  }
  return Status::ok();
}

Status ShardedRoute::zeroGrads() {
  for (int i : all_) {
    ParamRt &p = (*params_)[i];
    DMUON_RETURN_IF_ERROR(ctx_->device.zero(p.shard.grad.bytes(), p.shard.grad.size()));
  }
  return Status::ok();
}

} // namespace dmuon::rt
