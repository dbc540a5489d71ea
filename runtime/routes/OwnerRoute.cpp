#include "routes/OwnerRoute.h"

namespace dmuon::rt {

Status OwnerRoute::init(const Context &ctx, std::vector<ParamRt> &params,
                        ShardedRoute &sharded) {
  ctx_ = &ctx;
  params_ = &params;
  sharded_ = &sharded;
  const auto *hgs = ctx.plan.root().hook_groups();
  groups_.resize(hgs ? hgs->size() : 0);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const plan::HookGroup &hg = *hgs->Get(static_cast<flatbuffers::uoffset_t>(g));
    Group &grp = groups_[g];
    grp.name = hg.name()->str();
    grp.bufferBytes = hg.buffer_bytes();
    grp.reduceBufferBytes = hg.reduce_buffer_bytes();
    for (const plan::Segment *sp : *hg.segments()) {
      Segment seg;
      seg.so = sp->owner_shard();
      seg.offset = sp->offset();
      seg.bytes = sp->bytes();
      seg.reduceOffset = sp->reduce_offset();
      seg.reduceBytes = sp->reduce_bytes();
      for (int pi : *sp->params()) {
        seg.params.push_back(pi);
        seg.masterElements += params[pi].numel;
      }
      // Its params share owner and data dims (the verifier checked): the
      // first one's column is the segment's.
      if (!seg.params.empty()) {
        const ParamRt &first = params[seg.params.front()];
        seg.owner = first.isOwner;
        seg.column = first.column;
      }
      grp.segments.push_back(std::move(seg));
    }
  }
  return Status::ok();
}

uint8_t *OwnerRoute::packedValues(const ParamRt &p) const {
  const Group &grp = groups_[p.group];
  return grp.state == Unshard::Unsharded ? grp.packed.bytes() + p.plan->offset() : nullptr;
}

float *OwnerRoute::gradSlot(const ParamRt &p) const {
  const Group &grp = groups_[p.group];
  // Outside backward the buffer belongs to the reduce (or waits for the
  // next micro-batch): no pointer into it is handed out.
  return grp.inBackward
             ? reinterpret_cast<float *>(grp.grad.bytes() + p.plan->reduce_offset())
             : nullptr;
}

// ---------------------------------------------------------------- unshard

Status OwnerRoute::pack(const Segment &seg, uint8_t *dst) {
  for (int i : seg.params) {
    const ParamRt &p = (*params_)[i];
    const PackedType type =
        p.plan->dtype() == plan::DType::bf16 ? PackedType::BF16 : PackedType::F32;
    DMUON_RETURN_IF_ERROR(
        ctx_->device.packCast(dst + p.plan->offset(), type, p.master.floats(), p.numel));
  }
  return Status::ok();
}

Status OwnerRoute::unshard(int g) {
  Group &grp = groups_[g];
  if (grp.state != Unshard::Sharded)
    return Status::ok();
  // The packed data comes from owned data the last step's replicate
  // broadcast may still be writing.
  DMUON_RETURN_IF_ERROR(waitReplicate(g));
  DMUON_RETURN_IF_ERROR(grp.packed.allocate(ctx_->device, static_cast<size_t>(grp.bufferBytes),
                                            &ctx_->memory.buffers));
  const Topology &t = ctx_->topo;
  // One broadcast per owner, coalesced.
  CollectiveGroup coalesced(ctx_->backend);
  DMUON_RETURN_IF_ERROR(coalesced.opened());
  for (const Segment &seg : grp.segments) {
    if (seg.so == t.s)
      DMUON_RETURN_IF_ERROR(pack(seg, grp.packed.bytes()));
    if (t.G == 1)
      continue;
    RequestId id;
    DMUON_RETURN_IF_ERROR(ctx_->backend.broadcast(Communicator::Shard,
                                                  grp.packed.bytes() + seg.offset,
                                                  static_cast<size_t>(seg.bytes), seg.so, id));
    grp.broadcasts.push_back(id);
    ctx_->counters.countFanOut(DMUON_COLLECTIVE_BROADCAST, seg.so == t.s, t.G - 1,
                               static_cast<uint64_t>(seg.bytes));
  }
  DMUON_RETURN_IF_ERROR(sharded_->allGather(g, grp.packed.bytes(), grp.broadcasts));
  grp.state = Unshard::InFlight;
  return coalesced.close();
}

Status OwnerRoute::waitUnshard(int g) {
  Group &grp = groups_[g];
  for (RequestId id : grp.broadcasts)
    DMUON_RETURN_IF_ERROR(ctx_->backend.wait(id));
  grp.broadcasts.clear();
  if (grp.state == Unshard::InFlight)
    grp.state = Unshard::Unsharded;
  return Status::ok();
}

void OwnerRoute::reshard(int g) {
  Group &grp = groups_[g];
  grp.packed.release();
  grp.state = Unshard::Sharded;
}

// ----------------------------------------------------------------- reduce

Status OwnerRoute::beginBackward(int g) {
  Group &grp = groups_[g];
  grp.inBackward = true;
  if (grp.grad.live())
    return Status::ok();
  return grp.grad.allocate(ctx_->device, static_cast<size_t>(grp.reduceBufferBytes),
                           &ctx_->memory.buffers);
}

Status OwnerRoute::endBackward(int g, bool communicate) {
  Group &grp = groups_[g];
  grp.inBackward = false;
  const Topology &t = ctx_->topo;
  if (!communicate) {
    reshard(g);
    return Status::ok();
  }
  // Phase 1: sum over the shard group onto the row's shard owner (and each
  // sharded gradient onto its shards).
  {
    CollectiveGroup coalesced(ctx_->backend);
    DMUON_RETURN_IF_ERROR(coalesced.opened());
    if (t.G > 1)
      for (const Segment &seg : grp.segments)
        DMUON_RETURN_IF_ERROR(reduceSegment(grp, seg, Communicator::Shard, seg.so, t.s, t.G,
                                            grp.phase1));
    DMUON_RETURN_IF_ERROR(sharded_->reduceScatter(g, grp.grad.bytes(), grp.phase1));
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

Status OwnerRoute::drainPhase2() {
  while (!phase2Queue_.empty()) {
    const int q = phase2Queue_.front();
    phase2Queue_.pop_front();
    DMUON_RETURN_IF_ERROR(issuePhase2(q));
    retireQueue_.push_back(q);
  }
  return Status::ok();
}

Status OwnerRoute::issuePhase2(int g) {
  Group &grp = groups_[g];
  for (RequestId id : grp.phase1)
    DMUON_RETURN_IF_ERROR(ctx_->backend.wait(id));
  grp.phase1.clear();
  const Topology &t = ctx_->topo;
  // Phase 2: down the owner's column onto the global owner, and each shard
  // over the replicas.
  CollectiveGroup coalesced(ctx_->backend);
  DMUON_RETURN_IF_ERROR(coalesced.opened());
  for (const Segment &seg : grp.segments)
    if (seg.so == t.s && seg.column.size > 1)
      DMUON_RETURN_IF_ERROR(reduceSegment(grp, seg, seg.column.group, seg.column.root,
                                          seg.column.mine, seg.column.size, grp.phase2));
  if (t.R > 1)
    DMUON_RETURN_IF_ERROR(sharded_->allReduceReplicas(g, grp.grad.bytes(), grp.phase2));
  return coalesced.close();
}

// A segment's gradients summed over `comm` (`size` ranks, this one at
// `mine`) onto coordinate `root`.
Status OwnerRoute::reduceSegment(Group &grp, const Segment &seg, Communicator comm, int root,
                                 int mine, int size, std::vector<RequestId> &requests) {
  RequestId id;
  DMUON_RETURN_IF_ERROR(ctx_->backend.reduceSum(
      comm, reinterpret_cast<float *>(grp.grad.bytes() + seg.reduceOffset),
      static_cast<size_t>(seg.reduceBytes / 4), root, id));
  requests.push_back(id);
  ctx_->counters.countFanIn(DMUON_COLLECTIVE_REDUCE, root == mine, size - 1,
                            static_cast<uint64_t>(seg.reduceBytes));
  return Status::ok();
}

Status OwnerRoute::finishReduce() {
  DMUON_RETURN_IF_ERROR(drainPhase2());
  DMUON_RETURN_IF_ERROR(retireIssued());
  return Status::ok();
}

Status OwnerRoute::retireIssued() {
  while (!retireQueue_.empty()) {
    const int q = retireQueue_.front();
    retireQueue_.pop_front();
    DMUON_RETURN_IF_ERROR(retire(q));
  }
  return Status::ok();
}

Status OwnerRoute::retire(int g) {
  Group &grp = groups_[g];
  for (RequestId id : grp.phase2)
    DMUON_RETURN_IF_ERROR(ctx_->backend.wait(id));
  grp.phase2.clear();
  Device &dev = ctx_->device;
  // AVG over every rank whose data met here: G*R, and the data-carrying dims
  // (summed over them in the column, or already summed by the host's
  // all-to-all for a param they shard).
  const float scale = 1.0f / static_cast<float>(ctx_->topo.dataParallelSize);
  for (const Segment &seg : grp.segments) {
    if (!seg.owner)
      continue;
    for (int i : seg.params) {
      ParamRt &p = (*params_)[i];
      const float *src =
          reinterpret_cast<const float *>(grp.grad.bytes() + p.plan->reduce_offset());
      if (p.reducedGrad.live()) { // an earlier micro-batch's, reduced already
        DMUON_RETURN_IF_ERROR(dev.scaleAdd(p.reducedGrad.floats(), src, scale, p.numel));
        continue;
      }
      DMUON_RETURN_IF_ERROR(
          p.reducedGrad.allocate(dev, p.numel * sizeof(float), &ctx_->memory.grads));
      DMUON_RETURN_IF_ERROR(dev.scaleCopy(p.reducedGrad.floats(), src, scale, p.numel));
    }
  }
  DMUON_RETURN_IF_ERROR(sharded_->accumulate(g, grp.grad.bytes()));
  grp.grad.release(); // I3: only the global owner keeps a reduced gradient
  return Status::ok();
}

// -------------------------------------------------------------- replicate

Status OwnerRoute::broadcastReplicas() {
  const Topology &t = ctx_->topo;
  Device &dev = ctx_->device;
  for (size_t g = 0; g < groups_.size(); ++g) {
    Group &grp = groups_[g];
    CollectiveGroup coalesced(ctx_->backend);
    DMUON_RETURN_IF_ERROR(coalesced.opened());
    for (size_t si = 0; si < grp.segments.size(); ++si) {
      const Segment &seg = grp.segments[si];
      if (seg.so != t.s || seg.column.size == 1)
        continue;
      PendingReplicate pr;
      pr.segment = static_cast<int>(si);
      const size_t bytes = static_cast<size_t>(seg.masterElements) * sizeof(float);
      DMUON_RETURN_IF_ERROR(pr.staging.allocate(dev, bytes, &ctx_->memory.buffers));
      if (seg.owner) {
        size_t off = 0;
        for (int i : seg.params) {
          const ParamRt &p = (*params_)[i];
          DMUON_RETURN_IF_ERROR(
              dev.copy(pr.staging.floats() + off, p.master.bytes(), p.numel * sizeof(float)));
          off += static_cast<size_t>(p.numel);
        }
      }
      DMUON_RETURN_IF_ERROR(ctx_->backend.broadcast(seg.column.group, pr.staging.bytes(), bytes,
                                                    seg.column.root, pr.request));
      ctx_->counters.countFanOut(DMUON_COLLECTIVE_REPLICATE, seg.owner, seg.column.size - 1,
                                 bytes);
      grp.replicate.push_back(std::move(pr));
    }
    DMUON_RETURN_IF_ERROR(coalesced.close());
    // Sync mode waits here; async leaves it to the next unshard.
    if (!ctx_->config.replicateAsync)
      DMUON_RETURN_IF_ERROR(waitReplicate(static_cast<int>(g)));
  }
  return Status::ok();
}

Status OwnerRoute::waitReplicate(int g) {
  Group &grp = groups_[g];
  for (PendingReplicate &pr : grp.replicate) {
    DMUON_RETURN_IF_ERROR(ctx_->backend.wait(pr.request));
    const Segment &seg = grp.segments[pr.segment];
    if (seg.owner)
      continue; // the global owner sent it
    size_t off = 0;
    for (int i : seg.params) {
      ParamRt &p = (*params_)[i];
      DMUON_RETURN_IF_ERROR(ctx_->device.copy(p.master.bytes(), pr.staging.floats() + off,
                                              p.numel * sizeof(float)));
      off += static_cast<size_t>(p.numel);
    }
  }
  grp.replicate.clear();
  return Status::ok();
}

void OwnerRoute::endStep() {
  for (Group &grp : groups_)
    if (!grp.packed.live())
      grp.state = Unshard::Sharded;
}

} // namespace dmuon::rt
