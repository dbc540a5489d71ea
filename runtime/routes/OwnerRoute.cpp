#include "routes/OwnerRoute.h"

#include "optim/Optimizer.h"

namespace dmuon::rt {

Status OwnerRoute::init(const Context &ctx, std::vector<ParamRt> &params) {
  ctx_ = &ctx;
  params_ = &params;
  const auto *hgs = ctx.plan.root().hook_groups();
  segments_.resize(hgs ? hgs->size() : 0);
  replicate_.resize(segments_.size());
  for (size_t g = 0; g < segments_.size(); ++g) {
    const plan::HookGroup &hg = *hgs->Get(static_cast<flatbuffers::uoffset_t>(g));
    if (hg.pipeline_stage() != ctx.topo.stage)
      continue; // another stage's: its owners are ranks of that stage
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
        seg.owner = first.owner.isOwner;
        seg.column = first.owner.column;
      }
      segments_[g].push_back(std::move(seg));
    }
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].route == plan::Route::owner && params[i].owner.isOwner)
      owned_.push_back(static_cast<int>(i));
  return Status::ok();
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

Status OwnerRoute::unshard(int g, uint8_t *packed, std::vector<RequestId> &requests) {
  const Topology &t = ctx_->topo;
  // One broadcast per owner.
  for (const Segment &seg : segments_[g]) {
    if (seg.so == t.s)
      DMUON_RETURN_IF_ERROR(pack(seg, packed));
    if (t.G == 1)
      continue;
    RequestId id;
    DMUON_RETURN_IF_ERROR(ctx_->backend.broadcast(Communicator::Shard, packed + seg.offset,
                                                  static_cast<size_t>(seg.bytes), seg.so, id));
    requests.push_back(id);
    ctx_->counters.countFanOut(DMUON_COLLECTIVE_BROADCAST, seg.so == t.s, t.G - 1,
                               static_cast<uint64_t>(seg.bytes));
  }
  return Status::ok();
}

// ----------------------------------------------------------------- reduce

// Phase 1: each segment summed over the shard group onto its row's shard
// owner.
Status OwnerRoute::reduceShards(int g, uint8_t *grad, std::vector<RequestId> &requests) {
  const Topology &t = ctx_->topo;
  if (t.G > 1)
    for (const Segment &seg : segments_[g])
      DMUON_RETURN_IF_ERROR(
          reduceSegment(grad, seg, Communicator::Shard, seg.so, t.s, t.G, requests));
  return Status::ok();
}

// Phase 2: down the owner's column onto the global owner.
Status OwnerRoute::reduceReplicas(int g, uint8_t *grad, std::vector<RequestId> &requests) {
  const Topology &t = ctx_->topo;
  for (const Segment &seg : segments_[g])
    if (seg.so == t.s && seg.column.size > 1)
      DMUON_RETURN_IF_ERROR(reduceSegment(grad, seg, seg.column.group, seg.column.root,
                                          seg.column.mine, seg.column.size, requests));
  return Status::ok();
}

// A segment's gradients summed over `comm` (`size` ranks, this one at
// `mine`) onto coordinate `root`.
Status OwnerRoute::reduceSegment(uint8_t *grad, const Segment &seg, Communicator comm, int root,
                                 int mine, int size, std::vector<RequestId> &requests) {
  RequestId id;
  DMUON_RETURN_IF_ERROR(ctx_->backend.reduceSum(
      comm, reinterpret_cast<float *>(grad + seg.reduceOffset),
      static_cast<size_t>(seg.reduceBytes / 4), root, id));
  requests.push_back(id);
  ctx_->counters.countFanIn(DMUON_COLLECTIVE_REDUCE, root == mine, size - 1,
                            static_cast<uint64_t>(seg.reduceBytes));
  return Status::ok();
}

Status OwnerRoute::collect(int g, const uint8_t *grad) {
  Device &dev = ctx_->device;
  // AVG over every rank whose data met here: G*R, and the data-carrying dims
  // (summed over them in the column, or already summed by the host's
  // all-to-all for a param they shard).
  const float scale = 1.0f / static_cast<float>(ctx_->topo.dataParallelSize);
  for (const Segment &seg : segments_[g]) {
    if (!seg.owner)
      continue;
    for (int i : seg.params) {
      ParamRt &p = (*params_)[i];
      DeviceArray &reduced = p.owner.reducedGrad;
      const float *src = reinterpret_cast<const float *>(grad + p.plan->reduce_offset());
      if (reduced.live()) { // an earlier micro-batch's, reduced already
        DMUON_RETURN_IF_ERROR(dev.scaleAdd(reduced.floats(), src, scale, p.numel));
        continue;
      }
      DMUON_RETURN_IF_ERROR(reduced.allocate(dev, p.numel * sizeof(float), &ctx_->memory.grads));
      DMUON_RETURN_IF_ERROR(dev.scaleCopy(reduced.floats(), src, scale, p.numel));
    }
  }
  return Status::ok();
}

// ------------------------------------------------------------------- step

GradView OwnerRoute::averagedGrad(int index) {
  ParamRt &p = (*params_)[index];
  return {p.owner.reducedGrad.floats(), p.numel};
}

Status OwnerRoute::scaleGrads(float factor, bool muonToo) {
  for (int i : owned_) {
    ParamRt &p = (*params_)[i];
    DeviceArray &reduced = p.owner.reducedGrad;
    if ((muonToo || !p.muon) && reduced.live())
      DMUON_RETURN_IF_ERROR(
          ctx_->device.scaleCopy(reduced.floats(), reduced.floats(), factor, p.numel));
  }
  return Status::ok();
}

Status OwnerRoute::zeroGrads() {
  for (int i : owned_)
    (*params_)[i].owner.reducedGrad.release();
  return Status::ok();
}

Status OwnerRoute::step(int64_t adamwStep) {
  for (int i : owned_) {
    ParamRt &p = (*params_)[i];
    DMUON_RETURN_IF_ERROR(p.optimizer->step(*ctx_, p, p.owner.reducedGrad.floats(), p.numel,
                                            adamwStep));
    p.owner.reducedGrad.release();
  }
  return Status::ok();
}

// -------------------------------------------------------------- replicate

Status OwnerRoute::publish() {
  const Topology &t = ctx_->topo;
  Device &dev = ctx_->device;
  for (size_t g = 0; g < segments_.size(); ++g) {
    CollectiveGroup coalesced(ctx_->backend);
    DMUON_RETURN_IF_ERROR(coalesced.opened());
    for (size_t si = 0; si < segments_[g].size(); ++si) {
      const Segment &seg = segments_[g][si];
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
      replicate_[g].push_back(std::move(pr));
    }
    DMUON_RETURN_IF_ERROR(coalesced.close());
    // Sync mode waits here; async leaves it to the next unshard.
    if (!ctx_->config.replicateAsync)
      DMUON_RETURN_IF_ERROR(waitPublished(static_cast<int>(g)));
  }
  return Status::ok();
}

Status OwnerRoute::waitPublished(int g) {
  for (PendingReplicate &pr : replicate_[g]) {
    DMUON_RETURN_IF_ERROR(ctx_->backend.wait(pr.request));
    const Segment &seg = segments_[g][pr.segment];
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
  replicate_[g].clear();
  return Status::ok();
}

} // namespace dmuon::rt
