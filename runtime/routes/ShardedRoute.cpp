#include "routes/ShardedRoute.h"
#include "routes/AlongData.h"

namespace dmuon::rt {

namespace {

PackedType packedType(const ParamRt &p) {
  return p.plan->dtype() == plan::DType::bf16 ? PackedType::BF16 : PackedType::F32;
}

size_t elementBytes(const ParamRt &p) { return p.plan->dtype() == plan::DType::bf16 ? 2 : 4; }

} // namespace

Status ShardedRoute::init(const Context &ctx, std::vector<ParamRt> &params, int numGroups) {
  ctx_ = &ctx;
  params_ = &params;
  members_.assign(static_cast<size_t>(numGroups), {});
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].route == Route::Sharded) {
      members_[static_cast<size_t>(params[i].group)].push_back(static_cast<int>(i));
      all_.push_back(static_cast<int>(i));
    }
  return Status::ok();
}

Status ShardedRoute::allGather(int g, uint8_t *packed, std::vector<RequestId> &requests) {
  const Topology &t = ctx_->topo;
  for (int i : members_[static_cast<size_t>(g)]) {
    const ParamRt &p = (*params_)[i];
    const size_t shardBytes = static_cast<size_t>(p.shardElements) * elementBytes(p);
    uint8_t *base = packed + p.plan->offset();
    DMUON_RETURN_IF_ERROR(ctx_->device.packCast(base + static_cast<size_t>(t.s) * shardBytes,
                                                packedType(p), p.master.floats(),
                                                p.shardElements));
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

Status ShardedRoute::reduceScatter(int g, uint8_t *grad, std::vector<RequestId> &requests) {
  const Topology &t = ctx_->topo;
  for (int i : members_[static_cast<size_t>(g)]) {
    const ParamRt &p = (*params_)[i];
    const auto *send = reinterpret_cast<const float *>(grad + p.plan->reduce_offset());
    auto *recv = reinterpret_cast<float *>(grad + p.plan->shard_offset());
    const size_t bytes = static_cast<size_t>(p.shardElements) * sizeof(float);
    if (t.G == 1) {
      DMUON_RETURN_IF_ERROR(ctx_->device.copy(recv, send, bytes));
      continue;
    }
    RequestId id;
    DMUON_RETURN_IF_ERROR(ctx_->backend.reduceScatterSum(
        Communicator::Shard, send, recv, static_cast<size_t>(p.shardElements), id));
    requests.push_back(id);
    const uint64_t moved = static_cast<uint64_t>(t.G - 1) * bytes;
    ctx_->counters.count(DMUON_COLLECTIVE_REDUCE_SCATTER, moved, moved);
  }
  return Status::ok();
}

Status ShardedRoute::allReduceReplicas(int g, uint8_t *grad, std::vector<RequestId> &requests) {
  if (ctx_->topo.R == 1)
    return Status::ok();
  for (int i : members_[static_cast<size_t>(g)]) {
    const ParamRt &p = (*params_)[i];
    RequestId id;
    DMUON_RETURN_IF_ERROR(ctx_->backend.allReduceSum(
        Communicator::Replicate, reinterpret_cast<float *>(grad + p.plan->shard_offset()),
        static_cast<size_t>(p.shardElements), id));
    requests.push_back(id);
    const uint64_t bytes = static_cast<uint64_t>(p.shardElements) * sizeof(float);
    ctx_->counters.count(DMUON_COLLECTIVE_ALLREDUCE, bytes, bytes);
  }
  return Status::ok();
}

Status ShardedRoute::accumulate(int g, const uint8_t *grad) {
  // AVG over every rank whose data met here, as the owner route's reduce.
  const float scale = 1.0f / static_cast<float>(ctx_->topo.dataParallelSize);
  for (int i : members_[static_cast<size_t>(g)]) {
    ParamRt &p = (*params_)[i];
    DMUON_RETURN_IF_ERROR(ctx_->device.scaleAdd(
        p.gradShard.floats(), reinterpret_cast<const float *>(grad + p.plan->shard_offset()),
        scale, p.shardElements));
  }
  return Status::ok();
}

Status ShardedRoute::sumAlongData() {
  for (int i : all_) {
    ParamRt &p = (*params_)[i];
    DMUON_RETURN_IF_ERROR(rt::sumAlongData(*ctx_, p, p.gradShard.floats(),
                                           static_cast<size_t>(p.shardElements)));
  }
  return Status::ok();
}

Status ShardedRoute::step(int64_t adamwStep) {
  Device &dev = ctx_->device;
  for (int i : all_) {
    ParamRt &p = (*params_)[i];
    // The padding past shardReal has zero values and gradients: it stays 0.
    DMUON_RETURN_IF_ERROR(adamwUpdate(dev, p, ctx_->config.adamw, p.gradShard.floats(),
                                      p.shardElements, adamwStep));
  }
  return zeroGrads();
}

Status ShardedRoute::scaleGrads(float factor) {
  for (int i : all_) {
    ParamRt &p = (*params_)[i];
    DMUON_RETURN_IF_ERROR(ctx_->device.scaleCopy(p.gradShard.floats(), p.gradShard.floats(),
                                                 factor, p.shardElements));
  }
  return Status::ok();
}

Status ShardedRoute::zeroGrads() {
  for (int i : all_) {
    ParamRt &p = (*params_)[i];
    DMUON_RETURN_IF_ERROR(ctx_->device.zero(p.gradShard.bytes(), p.gradShard.size()));
  }
  return Status::ok();
}

} // namespace dmuon::rt
