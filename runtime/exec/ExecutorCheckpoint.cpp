// Checkpoints of the executor's training state: values and each update
// rule's state (Muon's momentum, AdamW's moments: optim/Optimizer.h) by
// param name (checkpoint/CheckpointFile.h), whatever their route.
// Each entry holds the chunk of the full param that its writer's local state
// is (the whole param unless it is sharded on a model-parallel dim; one
// entry per box where a StridedShard makes that state several), and a
// loading rank assembles its own chunk from the entries (checkpoint/CheckpointSlice.h),
// so a checkpoint saved under one mesh (or with other routes, or another
// model-parallel layout) loads under another. Both calls are collective.
// Rank 0 holds the directory's lock for all (exclusive for a save, shared
// for a load), and every shard records the save it belongs to.
#include "checkpoint/CheckpointFile.h"
#include "checkpoint/CheckpointSlice.h"
#include "common/MeshIndex.h"
#include "common/ShardChunks.h"
#include "exec/Executor.h"
#include "plan/PlanFile.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace dmuon::rt {

namespace {

std::string shardName(uint64_t planFingerprint, int64_t step, uint64_t nonce, int rank) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "shard-%016" PRIx64 "-%" PRId64 "-%016" PRIx64 "-r%05d.dmck",
                planFingerprint, step, nonce, rank);
  return buf;
}

} // namespace

uint64_t Executor::modelFingerprint() const {
  // Names and shapes, independent of order, mesh and options.
  std::vector<std::string> keys;
  for (const ParamRt &p : params_) {
    std::string k = p.name + ":";
    for (int64_t d : *p.plan->shape())
      k += std::to_string(d) + ",";
    keys.push_back(std::move(k));
  }
  std::sort(keys.begin(), keys.end());
  std::string all;
  for (const std::string &k : keys)
    all += k + ";";
  return planfile::fnv1a64(reinterpret_cast<const uint8_t *>(all.data()), all.size());
}

namespace {

std::vector<int64_t> fullShape(const ParamRt &p) {
  return {p.plan->shape()->begin(), p.plan->shape()->end()};
}

// The first dim of the columns of p's matrix view: a per-row state
// (StateShape::Rows) is the param with these dims collapsed to 1.
size_t firstColumnDim(const ParamRt &p) {
  const size_t ndim = p.plan->shape()->size();
  return p.plan->conv() ? 1 : (ndim ? ndim - 1 : 0);
}

} // namespace

// Which boxes of the full param each param's local state is, in plan order:
// DTensor's rule (common/ShardChunks.h), one box unless a StridedShard
// interleaves a dim (then one per run, each saved as its own entry).
// Host-route params have none (the runtime saves nothing of them).
Status Executor::localSlices(std::vector<ckpt::LocalBoxes> &out) const {
  out.assign(params_.size(), {});
  const plan::Mesh &mesh = *plan_->root().mesh();
  std::vector<int64_t> sizes;
  for (const plan::MeshDim *d : *mesh.dims())
    sizes.push_back(d->size());
  const std::vector<int64_t> coord = common::rowMajorCoord(sizes, topo_.rank);
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamRt &p = params_[i];
    if (p.route == plan::Route::host)
      continue;
    out[i] = ckpt::boxesOf(
        common::localIntervalsOf(fullShape(p), common::shardLayoutOf(*p.plan, mesh), coord));
    // The local state is what the plan's local shape says; boxes of another
    // size would save values under the wrong coordinates.
    if (out[i].numel() != p.sliceNumel || out[i].global.empty())
      return unsupported(
          "checkpoint: param '" + p.name + "' holds " + std::to_string(p.sliceNumel) +
          " values on rank " + std::to_string(topo_.rank) + ", but its " +
          std::to_string(out[i].global.size()) + " box(es) of the full param (the first " +
          (out[i].global.empty() ? std::string("none") : ckpt::describe(out[i].global[0])) +
          ") have " + std::to_string(out[i].numel()));
  }
  return Status::ok();
}

// One state array of a sharded param, whole, on the rank that `writes` it
// (gathered over its dp_shard group; every member calls this).
Status Executor::gatherShards(const ParamRt &p, const DeviceArray &shard, bool writes,
                              std::vector<float> &whole) {
  const size_t count = static_cast<size_t>(p.shard.elements);
  DeviceArray all;
  DMUON_RETURN_IF_ERROR(all.allocate(*device_, count * sizeof(float) * topo_.G));
  if (topo_.G > 1) {
    RequestId id;
    DMUON_RETURN_IF_ERROR(
        backend_->gather(Communicator::Shard, shard.floats(), all.floats(), count, 0, id));
    DMUON_RETURN_IF_ERROR(backend_->wait(id));
  } else {
    DMUON_RETURN_IF_ERROR(device_->copy(all.bytes(), shard.bytes(), count * sizeof(float)));
  }
  if (!writes)
    return Status::ok();
  whole.resize(static_cast<size_t>(p.sliceNumel)); // without the padding (Params.h)
  return device_->download(whole.data(), all.bytes(), whole.size() * sizeof(float));
}

bool Executor::midStep() const {
  // Gradients of this step are accumulating, or a hook group has started.
  return microBatches_ > 0 || hooks_.anyStarted();
}

// Every rank learns whether every rank succeeded, so all return together.
Status Executor::agree(const Status &local, const std::string &what) {
  std::vector<uint64_t> codes;
  DMUON_RETURN_IF_ERROR(backend_->allGather(static_cast<uint64_t>(local.code()), codes));
  if (!local)
    return local;
  for (size_t r = 0; r < codes.size(); ++r)
    if (codes[r] != DMUON_SUCCESS)
      return Status(static_cast<dmuon_status_t>(codes[r]),
                    what + " failed on rank " + std::to_string(r) + " (see that rank's error)");
  return Status::ok();
}

namespace {

// Writes this rank's state into its shard: each local state as one entry per
// box of the full param (slices, from localSlices), a rule's square state
// whole.
class ShardEntries {
public:
  ShardEntries(ckpt::ShardWriter &writer, Device &device, const std::vector<ParamRt> &params,
               const std::vector<ckpt::LocalBoxes> &slices)
      : writer_(writer), device_(device), params_(params), slices_(slices) {}

  // A local state on the host (`values`, without the padding: Params.h).
  Status addHostState(size_t i, ckpt::Kind kind, const std::vector<float> &values) {
    return addBoxes(i, kind, slices_[i], values);
  }

  // A local state on the device.
  Status addDeviceState(size_t i, ckpt::Kind kind, const DeviceArray &a) {
    host_.resize(static_cast<size_t>(params_[i].sliceNumel));
    DMUON_RETURN_IF_ERROR(device_.download(host_.data(), a.bytes(), host_.size() * 4));
    return addHostState(i, kind, host_);
  }

  // A rule's state field: shaped like the values, one per row, or square
  // matrices kept whole by the param's one owner.
  Status addRuleField(size_t i, const StateField &field, const DeviceArray &a) {
    if (field.shape == StateShape::Values)
      return addDeviceState(i, field.kind, a);
    const ParamRt &p = params_[i];
    if (field.shape == StateShape::Left || field.shape == StateShape::Right) {
      const int64_t n = stateElements(p, field);
      if (n == 0) // a side the rule leaves as it is
        return Status::ok();
      host_.resize(static_cast<size_t>(n));
      DMUON_RETURN_IF_ERROR(device_.download(host_.data(), a.bytes(), host_.size() * 4));
      const std::vector<int64_t> shape = squareStateShape(p, field);
      return writer_.add(p.name, field.kind, {std::vector<int64_t>(shape.size(), 0), shape},
                         host_.data(), host_.size() * 4);
    }
    host_.resize(static_cast<size_t>(p.sliceNumel / std::max<int64_t>(1, p.localCols)));
    DMUON_RETURN_IF_ERROR(device_.download(host_.data(), a.bytes(), host_.size() * 4));
    return addBoxes(i, field.kind, ckpt::rowBoxesOf(slices_[i], firstColumnDim(p)), host_);
  }

private:
  Status addBoxes(size_t i, ckpt::Kind kind, const ckpt::LocalBoxes &boxes,
                  const std::vector<float> &values) {
    if (boxes.whole())
      return writer_.add(params_[i].name, kind, boxes.global[0], values.data(), values.size() * 4);
    for (size_t b = 0; b < boxes.global.size(); ++b) {
      ckpt::extractBox(boxes, b, values.data(), box_);
      DMUON_RETURN_IF_ERROR(
          writer_.add(params_[i].name, kind, boxes.global[b], box_.data(), box_.size() * 4));
    }
    return Status::ok();
  }

  ckpt::ShardWriter &writer_;
  Device &device_;
  const std::vector<ParamRt> &params_;
  const std::vector<ckpt::LocalBoxes> &slices_;
  std::vector<float> host_, box_;
};

} // namespace

// A sharded param's value and rule state, whole, on the rank that writes
// them.
struct Executor::WholeState {
  size_t index;
  std::vector<float> value;
  std::vector<std::vector<float>> state; // per field of the param's rule
};

Status Executor::saveCheckpoint(const std::string &dir, int64_t step) {
  uint64_t nonce = 0;
  std::vector<ckpt::LocalBoxes> slices;
  // Rank 0 holds the directory for the whole save, for every rank: another
  // save's stale-file removal would otherwise take this one's shards, and its
  // manifest could name shards this one removes.
  ckpt::DirectoryLock lock;
  DMUON_RETURN_IF_ERROR(prepareSave(dir, step, nonce, slices, lock));
  std::vector<WholeState> wholes;
  DMUON_RETURN_IF_ERROR(gatherShardedState(wholes));
  DMUON_RETURN_IF_ERROR(
      agree(writeShard(dir, step, nonce, slices, wholes), "writing checkpoint shards"));
  // Only now does the checkpoint replace the previous one: the manifest is
  // the single atomic switch.
  Status manifest = Status::ok();
  if (topo_.rank == 0)
    manifest = writeSaveManifest(dir, step, nonce);
  return agree(manifest, "writing the checkpoint manifest");
}

// Checks that every rank may save `step` now and agrees on it; draws the
// save's nonce, finds this rank's boxes and, on rank 0, takes the directory.
Status Executor::prepareSave(const std::string &dir, int64_t step, uint64_t &nonce,
                             std::vector<ckpt::LocalBoxes> &slices, ckpt::DirectoryLock &lock) {
  // Local refusals still go through agree(): a rank that returned early would
  // leave the others waiting in it.
  Status ready = Status::ok();
  if (midStep())
    ready = invalidState("checkpoint_save inside a step; save after step() and before the next "
                         "pre_forward");
  for (const ParamRt &p : params_)
    if (ready && !p.bound)
      ready = invalidState("checkpoint_save: param '" + p.name + "' is not bound");
  if (ready)
    ready = synchronize(); // replicate broadcasts land first
  // A fresh name per save: shards never overwrite the ones the current
  // manifest names, even when a step number is saved twice.
  std::vector<uint64_t> nonces;
  uint64_t mine =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      (static_cast<uint64_t>(::getpid()) << 32);
  DMUON_RETURN_IF_ERROR(backend_->allGather(mine, nonces));
  nonce = nonces[0];
  // Rank 0's manifest names every rank's shard by the step: one step for all,
  // and one a load accepts.
  std::vector<uint64_t> steps;
  DMUON_RETURN_IF_ERROR(backend_->allGather(static_cast<uint64_t>(step), steps));
  for (size_t r = 0; ready && r < steps.size(); ++r)
    if (static_cast<int64_t>(steps[r]) != step)
      ready = invalidArgument("checkpoint_save: rank " + std::to_string(r) + " saves step " +
                              std::to_string(static_cast<int64_t>(steps[r])) + ", this rank " +
                              std::to_string(step) + "; every rank passes the same step");
  if (ready && step < 0)
    ready = invalidArgument("checkpoint_save: step " + std::to_string(step) +
                            " is negative; a checkpoint's step is an integer >= 0");
  if (ready)
    ready = localSlices(slices);
  if (ready && topo_.rank == 0)
    ready = ckpt::ensureDirectory(dir);
  if (ready && topo_.rank == 0)
    ready = lock.acquire(dir, ckpt::DirectoryLock::Mode::Save);
  return agree(ready, "checkpoint_save");
}

// Sharded params' state, whole: gathered over each dp_shard group before
// anything can fail locally (every rank joins its group's gathers). Only the
// rank that writes a param keeps it.
Status Executor::gatherShardedState(std::vector<WholeState> &wholes) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamRt &p = params_[i];
    if (p.route != plan::Route::sharded)
      continue;
    WholeState w{i, {}, std::vector<std::vector<float>>(p.state.size())};
    const bool writes = p.countsInNorm && topo_.s == 0;
    DMUON_RETURN_IF_ERROR(gatherShards(p, p.master, writes, w.value));
    for (size_t k = 0; k < p.state.size(); ++k)
      DMUON_RETURN_IF_ERROR(gatherShards(p, p.state[k], writes, w.state[k]));
    if (writes)
      wholes.push_back(std::move(w));
  }
  return Status::ok();
}

// This rank's shard: the sharded params it gathered, and the owner and
// replicated params it writes. Local: the caller agrees on the outcome.
Status Executor::writeShard(const std::string &dir, int64_t step, uint64_t nonce,
                            const std::vector<ckpt::LocalBoxes> &slices,
                            const std::vector<WholeState> &wholes) {
  const std::string name = shardName(plan_->fingerprint(), step, nonce, topo_.rank);
  Status local = ckpt::ensureDirectory(dir);
  if (!local)
    return local;
  ckpt::ShardWriter writer;
  local = writer.open(dir + "/" + name, {step, nonce, static_cast<uint32_t>(topo_.rank)});
  ShardEntries entries(writer, *device_, params_, slices);
  // One writer per chunk of each param's state, the rank whose copy the
  // gradient norm counts: the global owner of an owner-route param at the
  // first model-parallel copy; slot (0, 0) there for a replicated one; the
  // first shard of row 0 the gathered sharded state.
  std::vector<size_t> mine;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].countsInNorm &&
        (params_[i].route == plan::Route::owner || params_[i].route == plan::Route::replicated))
      mine.push_back(i);
  for (const WholeState &w : wholes) {
    if (!local)
      break;
    local = entries.addHostState(w.index, ckpt::Kind::Value, w.value);
    const std::span<const StateField> fields = params_[w.index].optimizer->fields();
    for (size_t k = 0; local && k < fields.size(); ++k)
      local = entries.addHostState(w.index, fields[k].kind, w.state[k]);
  }
  for (size_t k = 0; local && k < mine.size(); ++k) {
    if (k == mine.size() / 2 && ckpt::crashInjectedFor(topo_.rank))
      ::_exit(86); // fault injection: die with half a shard written
    const size_t i = mine[k];
    const ParamRt &p = params_[i];
    local = entries.addDeviceState(i, ckpt::Kind::Value, p.master);
    const std::span<const StateField> fields = p.optimizer->fields();
    for (size_t f = 0; local && f < fields.size(); ++f)
      local = entries.addRuleField(i, fields[f], p.state[f]);
  }
  if (local)
    local = writer.commit();
  return local;
}

// Rank 0's manifest, naming every rank's shard of this save; then the shards
// of earlier saves go.
Status Executor::writeSaveManifest(const std::string &dir, int64_t step, uint64_t nonce) {
  const uint64_t planFp = plan_->fingerprint();
  ckpt::Manifest m;
  m.step = step;
  m.adamwStep = adamwStep_;
  m.stepsApplied = stepsApplied_;
  m.stepsSkipped = stepsSkipped_;
  hyperParams(m.hyper);
  m.hasHyper = true;
  m.planFingerprint = planFp;
  m.modelFingerprint = modelFingerprint();
  m.hasNonce = true;
  m.nonce = nonce;
  m.worldSize = backend_->worldSize();
  for (int r = 0; r < m.worldSize; ++r)
    m.shards.push_back(shardName(planFp, step, nonce, r));
  Status manifest = ckpt::writeManifest(dir, m);
  if (manifest)
    ckpt::removeStaleShards(dir, m);
  return manifest;
}

Status Executor::loadCheckpoint(const std::string &dir, int64_t *step) {
  Status ready =
      midStep() ? invalidState("checkpoint_load inside a step; load between steps") : synchronize();
  std::vector<ckpt::LocalBoxes> slices;
  if (ready)
    ready = localSlices(slices);
  // Shared with other loads, refused while a save holds the directory: a
  // save removes the shards of the manifest it replaces.
  ckpt::DirectoryLock lock;
  if (ready && topo_.rank == 0)
    ready = lock.acquire(dir, ckpt::DirectoryLock::Mode::Load);
  DMUON_RETURN_IF_ERROR(agree(ready, "checkpoint_load"));

  // Read and check everything this rank needs before changing any state, so
  // a refused checkpoint leaves the runtime as it was.
  struct Staged {
    ParamRt *param;
    std::vector<float> value;
    std::vector<std::vector<float>> state; // per field of the param's rule
  };
  std::vector<Staged> staged;
  ckpt::Manifest manifest;
  Status local = ckpt::readManifest(dir, manifest);
  if (local && manifest.modelFingerprint != modelFingerprint())
    local = invalidArgument("checkpoint '" + dir +
                            "' is for a different model (its params' names or shapes differ "
                            "from this plan's)");
  std::vector<ckpt::ShardIndex> shards(manifest.shards.size());
  // Each shard of the save the manifest records, none copied in from another.
  for (size_t i = 0; local && i < shards.size(); ++i) {
    local = ckpt::readShardIndex(dir + "/" + manifest.shards[i], shards[i]);
    if (local)
      local = ckpt::checkShardBelongs(shards[i], dir, manifest, i);
  }
  // This rank's chunk of each state, box by box, from whichever entries
  // hold it.
  const ckpt::Catalog catalog(shards);
  std::vector<float> box;
  // A state shaped like the values, or (`rows`) one per row of the matrix view.
  auto fetchShaped = [&](size_t i, ckpt::Kind kind, bool rows, std::vector<float> &out) -> Status {
    const ParamRt &p = params_[i];
    const ckpt::LocalBoxes boxes =
        rows ? ckpt::rowBoxesOf(slices[i], firstColumnDim(p)) : slices[i];
    const std::vector<int64_t> full =
        rows ? ckpt::rowShapeOf(fullShape(p), firstColumnDim(p)) : fullShape(p);
    if (boxes.whole())
      return catalog.read(dir, p.name, kind, full, boxes.global[0], out);
    out.assign(static_cast<size_t>(boxes.numel()), 0.0f);
    for (size_t b = 0; b < boxes.global.size(); ++b) {
      DMUON_RETURN_IF_ERROR(catalog.read(dir, p.name, kind, full, boxes.global[b], box));
      ckpt::placeBox(boxes, b, box.data(), out.data());
    }
    return Status::ok();
  };
  auto fetch = [&](size_t i, ckpt::Kind kind, std::vector<float> &out) {
    return fetchShaped(i, kind, false, out);
  };
  for (size_t i = 0; local && i < params_.size(); ++i) {
    ParamRt &p = params_[i];
    if (p.route == plan::Route::host)
      continue;
    Staged st{&p, {}, std::vector<std::vector<float>>(p.state.size())};
    if (p.keepsValues())
      local = fetch(i, ckpt::Kind::Value, st.value);
    const std::span<const StateField> fields = p.optimizer->fields();
    for (size_t k = 0; local && p.stepsHere() && k < fields.size(); ++k) {
      if (fields[k].shape == StateShape::Left || fields[k].shape == StateShape::Right) {
        const std::vector<int64_t> shape = squareStateShape(p, fields[k]);
        if (stateElements(p, fields[k]) > 0)
          local = catalog.read(dir, p.name, fields[k].kind, shape,
                               {std::vector<int64_t>(shape.size(), 0), shape}, st.state[k]);
        continue;
      }
      local = fetchShaped(i, fields[k].kind, fields[k].shape == StateShape::Rows, st.state[k]);
    }
    // Held padded to the largest model-parallel slice (Params.h).
    if (!st.value.empty())
      st.value.resize(static_cast<size_t>(p.numel), 0.0f);
    for (size_t k = 0; k < fields.size(); ++k)
      if (!st.state[k].empty())
        st.state[k].resize(static_cast<size_t>(stateElements(p, fields[k])), 0.0f);
    std::vector<std::vector<float> *> arrays{&st.value};
    for (std::vector<float> &field : st.state)
      arrays.push_back(&field);
    if (p.route == plan::Route::sharded) // this rank's shard of each, padded
      for (std::vector<float> *whole : arrays) {
        std::vector<float> shard(static_cast<size_t>(p.shard.elements), 0.0f);
        if (!whole->empty())
          std::copy_n(whole->begin() + p.shard.begin, p.shard.real, shard.begin());
        *whole = std::move(shard);
      }
    staged.push_back(std::move(st));
  }
  DMUON_RETURN_IF_ERROR(agree(local, "reading checkpoint '" + dir + "'"));

  // A param loaded before it was bound gets its memory here.
  auto put = [&](DeviceArray &a, const std::vector<float> &host, MemoryAccount &account) -> Status {
    if (host.empty())
      return Status::ok();
    if (!a.live())
      DMUON_RETURN_IF_ERROR(a.allocate(*device_, host.size() * 4, &account));
    return device_->upload(a.bytes(), host.data(), host.size() * 4);
  };
  for (Staged &st : staged) {
    ParamRt &p = *st.param;
    const bool owner = p.route == plan::Route::owner;
    DMUON_RETURN_IF_ERROR(put(p.master, st.value, owner ? memory_.masters : memory_.values));
    const std::span<const StateField> fields = p.optimizer->fields();
    for (size_t k = 0; k < fields.size(); ++k)
      DMUON_RETURN_IF_ERROR(put(p.state[k], st.state[k], memory_.*fields[k].account));
    if (p.route == plan::Route::sharded && !p.shard.grad.live())
      DMUON_RETURN_IF_ERROR(p.shard.grad.allocate(
          *device_, static_cast<size_t>(p.shard.elements) * sizeof(float), &memory_.grads));
    p.bound = true;
  }
  adamwStep_ = manifest.adamwStep;
  stepsApplied_ = manifest.stepsApplied;
  stepsSkipped_ = manifest.stepsSkipped;
  // The schedule's values at the save; an older manifest's missing rows
  // (unset) leave this run's.
  if (manifest.hasHyper) {
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  if (!std::isnan(manifest.hyper.name))                                                            \
    config_.group.field = static_cast<float>(manifest.hyper.name);
#include "common/HyperParams.def"
  }
  if (step)
    *step = manifest.step;
  return Status::ok();
}

} // namespace dmuon::rt
