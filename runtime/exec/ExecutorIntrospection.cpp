// What tests, checkpoints and benchmarks read of the executor: a param's
// values from its keeper, the invariants' per-param state, and the plan's
// per-step communication figures for this rank.
#include "exec/Executor.h"
#include "common/RankRows.h"
#include "plan/PlanFile.h"

namespace dmuon::rt {

Status Executor::gatherParam(const std::string &name, float *out, int64_t numel) {
  int i;
  DMUON_RETURN_IF_ERROR(findParam(name, i));
  ParamRt &p = params_[i];
  DMUON_RETURN_IF_ERROR(checkOnStage(p, "gather_param('" + name + "')"));
  if (!out)
    return invalidArgument("gather_param('" + name + "'): out is null");
  if (numel != p.sliceNumel)
    return invalidArgument("gather_param('" + name + "'): buffer holds " + std::to_string(numel) +
                           " values but the param has " + std::to_string(p.sliceNumel) +
                           " in this rank's slice");
  if (!p.bound)
    return invalidState("gather_param('" + name + "'): param is not bound");
  // Moved padded (Params.h), handed out without the padding.
  const size_t bytes = static_cast<size_t>(p.numel) * sizeof(float);
  const size_t own = static_cast<size_t>(p.sliceNumel) * sizeof(float);
  if (p.route == plan::Route::host)
    return invalidArgument("gather_param('" + name +
                           "'): the param travels the host route; the runtime holds nothing "
                           "of it");
  if (p.route == plan::Route::replicated)
    return device_->download(out, p.master.bytes(), own);
  if (p.route == plan::Route::sharded) {
    // Every shard of the dp_shard group, gathered in a temporary buffer.
    const size_t shardBytes = static_cast<size_t>(p.shard.elements) * sizeof(float);
    DeviceArray all;
    DMUON_RETURN_IF_ERROR(all.allocate(*device_, shardBytes * static_cast<size_t>(topo_.G)));
    DMUON_RETURN_IF_ERROR(device_->copy(all.bytes() + static_cast<size_t>(topo_.s) * shardBytes,
                                        p.master.bytes(), shardBytes));
    if (topo_.G > 1) {
      RequestId id;
      DMUON_RETURN_IF_ERROR(backend_->allGatherInPlace(Communicator::Shard, all.bytes(), shardBytes, id));
      DMUON_RETURN_IF_ERROR(backend_->wait(id));
    }
    return device_->download(out, all.bytes(), own);
  }
  // The master of the rank at the owner slot in this rank's data-parallel
  // group (on the owner's column: it keeps one, current once its replicate
  // broadcast has landed), broadcast over the group in a temporary device
  // buffer (collectives work on device memory).
  DMUON_RETURN_IF_ERROR(ownerRoute_.waitPublished(p.group));
  DeviceArray tmp;
  DMUON_RETURN_IF_ERROR(tmp.allocate(*device_, bytes));
  if (topo_.s == p.owner.so && topo_.r == p.owner.ro)
    DMUON_RETURN_IF_ERROR(device_->copy(tmp.bytes(), p.master.bytes(), bytes));
  RequestId id;
  DMUON_RETURN_IF_ERROR(backend_->broadcast(Communicator::DataParallel, tmp.bytes(), bytes,
                                            topo_.dataParallelRank(p.owner.so, p.owner.ro), id));
  DMUON_RETURN_IF_ERROR(backend_->wait(id));
  return device_->download(out, tmp.bytes(), own);
}

Status Executor::paramState(const std::string &name, dmuon_param_state_t &out) const {
  int i;
  DMUON_RETURN_IF_ERROR(findParam(name, i));
  const ParamRt &p = params_[i];
  out = {};
  out.is_owner = p.owner.isOwner;
  out.has_owned_data = p.master.live();
  out.has_reduced_grad = p.owner.reducedGrad.live();
  const DeviceArray *momentum = stateOf(p, ckpt::Kind::Momentum);
  out.has_momentum = momentum && momentum->live();
  if (p.master.live()) {
    std::vector<uint8_t> host(p.master.size());
    DMUON_RETURN_IF_ERROR(device_->download(host.data(), p.master.bytes(), host.size()));
    out.owned_checksum = planfile::fnv1a64(host.data(), host.size());
  }
  return Status::ok();
}

dmuon_comm_counters_t Executor::plannedCounters() const {
  dmuon_comm_counters_t c{};
  const plan::RankFigures *f = common::RankRows(plan_->root()).ofRank(topo_.rank);
  // The plan prices one micro-batch in its own mode; scale the unshard
  // broadcasts to ours and to the last step's micro-batches, and the reduces
  // to them when every micro-batch reduces.
  const uint64_t k = static_cast<uint64_t>(microBatchesLastStep_);
  const uint64_t planUnshards = config_.planZ3 ? 2 : 1, ourUnshards = (config_.z3 ? 2 : 1) * k;
  const uint64_t reduces = config_.accumulateLocally ? 1 : k;
  c.kinds[DMUON_COLLECTIVE_BROADCAST].sent = f->broadcast_send_bytes() / planUnshards * ourUnshards;
  c.kinds[DMUON_COLLECTIVE_BROADCAST].received = f->broadcast_recv_bytes() / planUnshards * ourUnshards;
  c.kinds[DMUON_COLLECTIVE_REDUCE].sent = f->reduce_send_bytes() * reduces;
  c.kinds[DMUON_COLLECTIVE_REDUCE].received = f->reduce_recv_bytes() * reduces;
  c.kinds[DMUON_COLLECTIVE_REPLICATE].sent = f->replicate_send_bytes();
  c.kinds[DMUON_COLLECTIVE_REPLICATE].received = f->replicate_recv_bytes();
  // allreduce_bytes holds the replicated params' all-reduce (left to the
  // host without manage_adamw) and the shards' over dp_replicate (phase 2:
  // once per reduce) and along the data-carrying dims (once per step).
  uint64_t shardPhase2 = 0;
  for (const ParamRt &p : params_)
    if (p.route == plan::Route::sharded && topo_.R > 1)
      shardPhase2 += static_cast<uint64_t>(p.shard.elements) * sizeof(float);
  const uint64_t allreduce = f->allreduce_bytes() -
                             (config_.manageAdamW ? 0 : replicatedRoute_.allReduceBytesPerStep()) +
                             shardPhase2 * (reduces - 1) + f->data_allreduce_bytes();
  c.kinds[DMUON_COLLECTIVE_ALLREDUCE].sent = allreduce;
  c.kinds[DMUON_COLLECTIVE_ALLREDUCE].received = allreduce;
  c.kinds[DMUON_COLLECTIVE_GATHER].sent = f->gather_send_bytes();
  c.kinds[DMUON_COLLECTIVE_GATHER].received = f->gather_recv_bytes();
  c.kinds[DMUON_COLLECTIVE_SCATTER].sent = f->scatter_send_bytes();
  c.kinds[DMUON_COLLECTIVE_SCATTER].received = f->scatter_recv_bytes();
  c.kinds[DMUON_COLLECTIVE_ALLGATHER].sent = f->allgather_send_bytes() / planUnshards * ourUnshards;
  c.kinds[DMUON_COLLECTIVE_ALLGATHER].received = f->allgather_recv_bytes() / planUnshards * ourUnshards;
  c.kinds[DMUON_COLLECTIVE_REDUCE_SCATTER].sent = f->reduce_scatter_send_bytes() * reduces;
  c.kinds[DMUON_COLLECTIVE_REDUCE_SCATTER].received = f->reduce_scatter_recv_bytes() * reduces;
  return c;
}

void Executor::plannedMemory(dmuon_memory_report_t &out) const {
  const plan::RankFigures *f = common::RankRows(plan_->root()).ofRank(topo_.rank);
  auto put = [](dmuon_memory_category_t &c, int64_t bytes) {
    c.live = c.peak = static_cast<uint64_t>(bytes);
  };
  put(out.masters, f->master_bytes());
  put(out.momentum, f->momentum_bytes());
  put(out.values, f->value_bytes());
  put(out.adam_moments, f->adam_moment_bytes());
  put(out.grads, f->grad_bytes());
  put(out.buffers, f->peak_buffer_bytes());
}

void Executor::memory(dmuon_memory_report_t &out) const {
  auto put = [](dmuon_memory_category_t &c, const MemoryAccount &a) {
    c.live = a.live;
    c.peak = a.peak;
  };
  put(out.masters, memory_.masters);
  put(out.momentum, memory_.momentum);
  put(out.values, memory_.values);
  put(out.adam_moments, memory_.adamMoments);
  put(out.grads, memory_.grads);
  put(out.buffers, memory_.buffers);
}

} // namespace dmuon::rt
