// Verify-before-read for plan buffers. Every check returns a message that
// names the field, param and value at fault; nothing here reads outside the
// buffer, whatever its contents (FlatBuffers' verifier runs before any
// accessor, and every index is range-checked before it is followed).
#include "plan/PlanFile.h"

#include "common/Hex.h"
#include "common/MeshIndex.h"
#include "common/PlanRules.h"
#include "dmuon/plan_version.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <sys/stat.h>

namespace dmuon::planfile {

namespace fb = dmuon::plan;

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;

uint64_t fnv1a64From(uint64_t h, const uint8_t *data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    h ^= data[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

} // namespace

uint64_t fnv1a64(const uint8_t *data, size_t size) { return fnv1a64From(kFnvOffset, data, size); }

bool computeFingerprint(const uint8_t *data, size_t size, uint64_t &out) {
  if (size < 8)
    return false;
  // SetField on an absent field "succeeds" when the value is the default, so
  // presence is checked on the table itself.
  const auto *table = flatbuffers::GetRoot<flatbuffers::Table>(data);
  const flatbuffers::voffset_t field = table->GetOptionalFieldOffset(fb::Plan::VT_FINGERPRINT);
  if (!field)
    return false;
  // The hash of the buffer with the field's 8 bytes at zero, streamed around
  // the field instead of hashing a copy (plans run to tens of megabytes).
  const uint8_t *at = reinterpret_cast<const uint8_t *>(table) + field;
  if (at < data || at + sizeof(uint64_t) > data + size)
    return false;
  static constexpr uint8_t kZero[sizeof(uint64_t)] = {};
  uint64_t h = fnv1a64From(kFnvOffset, data, static_cast<size_t>(at - data));
  h = fnv1a64From(h, kZero, sizeof kZero);
  out = fnv1a64From(h, at + sizeof kZero, static_cast<size_t>(data + size - at) - sizeof kZero);
  return true;
}

bool stampFingerprint(uint8_t *data, size_t size) {
  uint64_t fp;
  if (!computeFingerprint(data, size, fp))
    return false;
  return fb::GetMutablePlan(data)->mutate_fingerprint(fp);
}

std::string readFile(const std::string &path, std::vector<uint8_t> &out) {
  out.clear();
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return std::strerror(errno);
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::fclose(f);
    return std::strerror(EISDIR);
  }
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0)
    out.insert(out.end(), chunk, chunk + n);
  if (std::ferror(f)) {
    int err = errno;
    std::fclose(f);
    out.clear();
    return err ? std::strerror(err) : "read error";
  }
  std::fclose(f);
  return {};
}

namespace {

using common::hex64;
using common::dtypeBytes;
using common::kMaxElements;

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

template <typename T> uint32_t size(const flatbuffers::Vector<T> *v) {
  return v ? v->size() : 0;
}

template <typename E> bool enumOk(E e, E lo, E hi) { return !flatbuffers::IsOutRange(e, lo, hi); }

// Product of non-negative dims, false past kMaxElements (a zero dim makes the
// product 0, but the other dims are still bounded, as dmuonc bounds them).
bool elementCount(const flatbuffers::Vector<int64_t> *dims, int64_t &out) {
  int64_t n = 1;
  bool zero = false;
  if (dims)
    for (int64_t d : *dims) {
      if (d == 0)
        zero = true;
      else if (d < 0 || n > kMaxElements / d)
        return false;
      else
        n *= d;
    }
  out = zero ? 0 : n;
  return true;
}

// a*b*c for factors >= 1, false past kMaxElements.
bool boundedProduct(int64_t a, int64_t b, int64_t c, int64_t &out) {
  if (a < 1 || b < 1 || c < 1 || a > kMaxElements / b || a * b > kMaxElements / c)
    return false;
  out = a * b * c;
  return true;
}

std::string matrixStr(int64_t b, int64_t r, int64_t c) {
  return std::to_string(b) + "x" + std::to_string(r) + "x" + std::to_string(c);
}

// Semantic checks on a buffer the FlatBuffers verifier has accepted.
class Checker {
public:
  Checker(const fb::Plan &p, const uint8_t *base) : p_(p), base_(base) {}
  std::string run(bool requireComplete);

private:
  std::string checkAlignment();
  std::string checkMesh();
  std::string checkParams();
  std::string checkModelParallel(const fb::Param &q, const std::string &who);
  std::string checkCompleteParam(const fb::Param &q, const std::string &who);
  std::string checkSegmentParams(const fb::HookGroup &h, int64_t hi, const fb::Segment &s,
                                 const std::string &sw);
  std::string checkUnits();
  std::string checkGroups();
  std::string checkHooks();
  std::string checkStats();

  // The executor's own invariants, checked on complete plans only (a
  // --stop-after plan is printed, never executed).
  bool complete() const { return p_.stage() == fb::Stage::complete; }
  std::string slotStr(int64_t slot) const {
    return std::to_string(slot) + " (" + std::to_string(slot % G_) + "," +
           std::to_string(slot / G_) + ")";
  }
  bool reached(fb::Stage s) const {
    return static_cast<int>(p_.stage()) >= static_cast<int>(s);
  }
  std::string paramName(int64_t i) const {
    if (p_.params() && i >= 0 && i < static_cast<int64_t>(p_.params()->size()))
      return str(p_.params()->Get(static_cast<uint32_t>(i))->name());
    return "#" + std::to_string(i);
  }
  // "'<what>' index <i> out of range (plan has <n> <things>)" or empty.
  static std::string range(const std::string &what, int64_t i, int64_t n,
                           const char *things, bool allowNone) {
    if ((allowNone && i == -1) || (i >= 0 && i < n))
      return {};
    return what + " " + std::to_string(i) + " out of range (plan has " +
           std::to_string(n) + " " + things + ")";
  }
  std::string paramList(const std::string &where,
                        const flatbuffers::Vector<int32_t> *list) const {
    if (!list)
      return {};
    for (int32_t i : *list)
      if (std::string e = range(where + ": param index", i, numParams_, "params", false);
          !e.empty())
        return e;
    return {};
  }

  const fb::Plan &p_;
  const uint8_t *base_;
  int64_t world_ = 1, G_ = 1, R_ = 1;
  int64_t numParams_ = 0, numUnits_ = 0, numComm_ = 0, numHooks_ = 0;
  std::vector<int64_t> dimSizes_;
  // Complete plans: how many segments list each param.
  std::vector<int> segmentsOf_;
  int64_t adamwElements_ = 0;
  int shardDim_ = -1, replicateDim_ = -1;

  int64_t slotRank(int64_t s, int64_t r) const {
    return common::slotRank(dimSizes_, shardDim_, replicateDim_, s, r);
  }
};

// The FlatBuffers verifier checks a vector's length prefix for 4-byte
// alignment only; 8-byte elements must be 8-aligned before they are read.
std::string Checker::checkAlignment() {
  // (An empty vector is not aligned by the builder, and nothing is read from it.)
  auto misaligned = [&](const auto *v) {
    return v->size() != 0 &&
           (reinterpret_cast<uintptr_t>(v->Data()) - reinterpret_cast<uintptr_t>(base_)) % 8 != 0;
  };
  for (uint32_t i = 0; i < size(p_.params()); ++i) {
    const fb::Param *q = p_.params()->Get(i);
    if (q->shape() && misaligned(q->shape()))
      return "corrupt plan: param #" + std::to_string(i) + " has a misaligned shape vector";
    if (q->local_shape() && misaligned(q->local_shape()))
      return "corrupt plan: param #" + std::to_string(i) +
             " has a misaligned local_shape vector";
  }
  if (p_.stats() && p_.stats()->slot_load() && misaligned(p_.stats()->slot_load()))
    return "corrupt plan: stats.slot_load is misaligned";
  return {};
}

std::string Checker::checkMesh() {
  const fb::Mesh *m = p_.mesh();
  if (!m)
    return "plan has no mesh";
  if (!m->dims() || m->dims()->size() == 0)
    return "mesh has no dims";
  constexpr int64_t kMaxWorld = int64_t(1) << 30;
  int64_t product = 1;
  for (uint32_t i = 0; i < m->dims()->size(); ++i) {
    const fb::MeshDim *d = m->dims()->Get(i);
    std::string name = str(d->name());
    if (name.empty())
      return "mesh dim " + std::to_string(i) + " has no name";
    if (d->size() < 1)
      return "mesh dim '" + name + "' has size " + std::to_string(d->size()) +
             " (must be at least 1)";
    product *= d->size();
    if (product > kMaxWorld)
      return "mesh has more than " + std::to_string(kMaxWorld) + " ranks";
    dimSizes_.push_back(d->size());
  }
  if (m->world_size() != product)
    return "mesh world_size is " + std::to_string(m->world_size()) +
           " but its dims multiply to " + std::to_string(product);
  int n = static_cast<int>(dimSizes_.size());
  if (m->shard_dim() < -1 || m->shard_dim() >= n)
    return "mesh shard_dim " + std::to_string(m->shard_dim()) + " out of range (mesh has " +
           std::to_string(n) + " dims)";
  if (m->replicate_dim() < -1 || m->replicate_dim() >= n)
    return "mesh replicate_dim " + std::to_string(m->replicate_dim()) +
           " out of range (mesh has " + std::to_string(n) + " dims)";
  if (m->shard_dim() >= 0 && m->shard_dim() == m->replicate_dim())
    return "mesh shard_dim and replicate_dim are both " + std::to_string(m->shard_dim());
  shardDim_ = m->shard_dim();
  replicateDim_ = m->replicate_dim();
  int64_t g = shardDim_ < 0 ? 1 : dimSizes_[shardDim_];
  int64_t r = replicateDim_ < 0 ? 1 : dimSizes_[replicateDim_];
  if (m->num_shards() != g)
    return "mesh num_shards is " + std::to_string(m->num_shards()) + ", expected " +
           std::to_string(g) + " (the size of its shard dim)";
  if (m->num_replicas() != r)
    return "mesh num_replicas is " + std::to_string(m->num_replicas()) + ", expected " +
           std::to_string(r) + " (the size of its replicate dim)";
  world_ = product;
  G_ = g;
  R_ = r;
  return {};
}

std::string Checker::checkParams() {
  if (!p_.params())
    return {};
  uint32_t ndims = static_cast<uint32_t>(dimSizes_.size());
  std::unordered_map<std::string_view, uint32_t> byName;
  for (uint32_t i = 0; i < p_.params()->size(); ++i) {
    const fb::Param *q = p_.params()->Get(i);
    if (!q->name() || q->name()->size() == 0)
      return "param #" + std::to_string(i) + " has no name";
    std::string who = "param '" + q->name()->str() + "'";
    if (complete()) {
      auto [it, inserted] = byName.try_emplace(q->name()->string_view(), i);
      if (!inserted)
        return "params #" + std::to_string(it->second) + " and #" + std::to_string(i) +
               " are both named '" + q->name()->str() + "'";
    }
    if (!q->shape())
      return who + " has no shape";
    for (int64_t d : *q->shape())
      if (d < 0)
        return who + " has a negative dim " + std::to_string(d) + " in its shape";
    if (!enumOk(q->dtype(), fb::DType::MIN, fb::DType::MAX))
      return who + ": unknown dtype " + std::to_string(static_cast<int>(q->dtype()));
    if (!enumOk(q->role(), fb::Role::MIN, fb::Role::MAX))
      return who + ": unknown role " + std::to_string(static_cast<int>(q->role()));
    if (!enumOk(q->role_reason(), fb::RoleReason::MIN, fb::RoleReason::MAX))
      return who + ": unknown role_reason " +
             std::to_string(static_cast<int>(q->role_reason()));
    if (!enumOk(q->group(), fb::ShardingGroupKind::MIN, fb::ShardingGroupKind::MAX))
      return who + ": unknown sharding group kind " +
             std::to_string(static_cast<int>(q->group()));
    if (!enumOk(q->name_origin(), fb::NameOrigin::MIN, fb::NameOrigin::MAX))
      return who + ": unknown name_origin " +
             std::to_string(static_cast<int>(q->name_origin()));
    if (q->placements()) {
      if (q->placements()->size() != 0 && q->placements()->size() != ndims)
        return who + " has " + std::to_string(q->placements()->size()) +
               " placements but the mesh has " + std::to_string(ndims) + " dims";
      for (const fb::Placement *pl : *q->placements())
        if (!enumOk(pl->kind(), fb::PlacementKind::MIN, fb::PlacementKind::MAX))
          return who + ": unknown placement kind " +
                 std::to_string(static_cast<int>(pl->kind()));
    }
    if (auto e = checkModelParallel(*q, who); !e.empty())
      return e;
    if (auto e = range(who + ": unit", q->unit(), numUnits_, "units", true); !e.empty())
      return e;
    if (auto e = range(who + ": comm_group", q->comm_group(), numComm_, "comm groups", true);
        !e.empty())
      return e;
    if (auto e = range(who + ": hook_group", q->hook_group(), numHooks_, "hook groups", true);
        !e.empty())
      return e;
    bool muon = q->role() == fb::Role::muon;
    bool hasOwner =
        q->owner_shard() != -1 || q->owner_replicate() != -1 || q->owner_rank() != -1;
    if (muon && reached(fb::Stage::partition)) {
      if (q->unit() < 0)
        return who + " is a Muon param but has no unit";
      hasOwner = true;
    }
    if (hasOwner) {
      if (q->owner_shard() < 0 || q->owner_shard() >= G_)
        return who + ": owner_shard " + std::to_string(q->owner_shard()) +
               " out of range (mesh has " + std::to_string(G_) + " shards)";
      if (q->owner_replicate() < 0 || q->owner_replicate() >= R_)
        return who + ": owner_replicate " + std::to_string(q->owner_replicate()) +
               " out of range (mesh has " + std::to_string(R_) + " replicas)";
      if (q->owner_rank() < 0 || q->owner_rank() >= world_)
        return who + ": owner_rank " + std::to_string(q->owner_rank()) +
               " out of range (world size " + std::to_string(world_) + ")";
      int64_t want = slotRank(q->owner_shard(), q->owner_replicate());
      if (q->owner_rank() != want)
        return who + ": owner_rank " + std::to_string(q->owner_rank()) + " is not the rank " +
               std::to_string(want) + " of its owner slot (" +
               std::to_string(q->owner_shard()) + "," +
               std::to_string(q->owner_replicate()) + ")";
    }
    if (q->bytes() < 0 || q->reduce_bytes() < 0)
      return who + " has negative bytes";
    if (q->hook_group() >= 0 && q->offset() >= 0) {
      const fb::HookGroup *h = p_.hook_groups()->Get(static_cast<uint32_t>(q->hook_group()));
      if (q->offset() > h->buffer_bytes() || q->bytes() > h->buffer_bytes() - q->offset())
        return who + ": bytes [" + std::to_string(q->offset()) + ", +" +
               std::to_string(q->bytes()) + ") lie outside hook group '" + str(h->name()) +
               "' buffer of " + std::to_string(h->buffer_bytes()) + " bytes";
      if (q->reduce_offset() >= 0 &&
          (q->reduce_offset() > h->reduce_buffer_bytes() ||
           q->reduce_bytes() > h->reduce_buffer_bytes() - q->reduce_offset()))
        return who + ": reduce bytes [" + std::to_string(q->reduce_offset()) + ", +" +
               std::to_string(q->reduce_bytes()) + ") lie outside hook group '" +
               str(h->name()) + "' reduce buffer of " +
               std::to_string(h->reduce_buffer_bytes()) + " bytes";
    }
    if (complete())
      if (auto e = checkCompleteParam(*q, who); !e.empty())
        return e;
  }
  return {};
}

// What the executor trusts of a param in a complete plan (checkParams and
// checkModelParallel have accepted it: local_shape has shape's rank, indices
// are in range or -1, owner coordinates are in range).
std::string Checker::checkCompleteParam(const fb::Param &q, const std::string &who) {
  int64_t global, local;
  if (!elementCount(q.shape(), global))
    return who + ": shape has more than 2^48 elements";
  if (!elementCount(q.local_shape(), local))
    return who + ": local_shape has more than 2^48 elements";
  if (q.role() != fb::Role::muon) {
    // Their gradients share one buffer.
    adamwElements_ += local;
    if (adamwElements_ > kMaxElements)
      return who + ": AdamW params up to this one have more than 2^48 local elements";
    return {};
  }

  // Ownership: the executor takes the owner slot from the unit.
  if (q.unit() < 0)
    return who + " is a Muon param but has no unit";
  const fb::Unit *u = p_.units()->Get(static_cast<uint32_t>(q.unit()));
  const int64_t slot = u->slot();
  if (slot < 0 || slot >= G_ * R_)
    return who + ": unit " + std::to_string(q.unit()) + " '" + str(u->name()) + "' slot " +
           std::to_string(slot) + " out of range (plan has " + std::to_string(G_ * R_) +
           " owner slots)";
  if (q.owner_shard() != slot % G_ || q.owner_replicate() != slot / G_)
    return who + ": owner slot (" + std::to_string(q.owner_shard()) + "," +
           std::to_string(q.owner_replicate()) + ") is not its unit's slot " + slotStr(slot);

  // Placement in its hook group's buffers.
  if (q.hook_group() < 0)
    return who + " is a Muon param but has no hook_group";
  if (q.offset() < 0)
    return who + " is a Muon param but has no offset (" + std::to_string(q.offset()) + ")";
  if (q.reduce_offset() < 0)
    return who + " is a Muon param but has no reduce_offset (" +
           std::to_string(q.reduce_offset()) + ")";
  const int64_t elemBytes = dtypeBytes(q.dtype());
  if (q.bytes() != local * elemBytes)
    return who + ": bytes is " + std::to_string(q.bytes()) + ", expected " +
           std::to_string(local * elemBytes) + " (" + std::to_string(local) +
           " local elements of " + fb::EnumNameDType(q.dtype()) + ")";
  if (q.reduce_bytes() != local * 4)
    return who + ": reduce_bytes is " + std::to_string(q.reduce_bytes()) + ", expected " +
           std::to_string(local * 4) + " (" + std::to_string(local) +
           " local elements of f32)";

  // The matrix views the executor runs Newton-Schulz on.
  int64_t n;
  const std::string lv = matrixStr(q.local_batch(), q.local_rows(), q.local_cols());
  if (!boundedProduct(q.local_batch(), q.local_rows(), q.local_cols(), n))
    return who + ": local matrix view " + lv +
           " has a dim below 1 or more than 2^48 elements";
  if (n != local)
    return who + ": local matrix view " + lv + " has " + std::to_string(n) +
           " elements but local_shape has " + std::to_string(local);
  const std::string gv = matrixStr(q.batch(), q.rows(), q.cols());
  if (!boundedProduct(q.batch(), q.rows(), q.cols(), n))
    return who + ": matrix view " + gv + " has a dim below 1 or more than 2^48 elements";
  if (n != global)
    return who + ": matrix view " + gv + " has " + std::to_string(n) +
           " elements but shape has " + std::to_string(global);
  // A comm param's NS runs on local_batch x rows x cols: the local shards of
  // its gather group, concatenated.
  if (q.group() == fb::ShardingGroupKind::comm) {
    const int64_t k = dimSizes_[static_cast<size_t>(q.gather_mesh_dim())];
    if (!boundedProduct(q.local_batch(), q.rows(), q.cols(), n) || n % k != 0 ||
        n / k != local)
      return who + ": gathered matrix view " +
             matrixStr(q.local_batch(), q.rows(), q.cols()) +
             " (local_batch x rows x cols) is not " + std::to_string(k) + " local shards of " +
             std::to_string(local) + " elements (gather mesh dim " +
             std::to_string(q.gather_mesh_dim()) + ")";
  }
  return {};
}

// local_shape (from validate on) is a shard of shape; a comm Muon param
// (from group on) gathers over a model-parallel mesh dim that Shards the
// tensor dim it names, and (from layout on) has a compute index on that dim.
std::string Checker::checkModelParallel(const fb::Param &q, const std::string &who) {
  const int64_t ndims = static_cast<int64_t>(dimSizes_.size());
  if (reached(fb::Stage::validate)) {
    if (!q.local_shape())
      return who + " has no local_shape";
    if (q.local_shape()->size() != q.shape()->size())
      return who + " has a local_shape of " + std::to_string(q.local_shape()->size()) +
             " dims for a shape of " + std::to_string(q.shape()->size());
    for (uint32_t d = 0; d < q.shape()->size(); ++d) {
      int64_t global = q.shape()->Get(d), local = q.local_shape()->Get(d);
      if (local < 0 || (local == 0 ? global != 0 : global % local != 0))
        return who + ": local_shape dim " + std::to_string(d) + " of size " +
               std::to_string(local) + " does not divide its global size " +
               std::to_string(global);
    }
  }
  const bool comm = q.role() == fb::Role::muon && q.group() == fb::ShardingGroupKind::comm;
  if (!reached(fb::Stage::group))
    return {};
  if (!comm) {
    if (q.gather_mesh_dim() != -1 || q.compute_index() != -1)
      return who + " is not a comm Muon param but has a gather mesh dim or compute index";
    return {};
  }
  // A comm param's gather is checked once partition has accepted it.
  if (!reached(fb::Stage::partition) && q.gather_mesh_dim() == -1)
    return {};
  const int32_t g = q.gather_mesh_dim();
  if (g < 0 || g >= ndims)
    return who + ": gather_mesh_dim " + std::to_string(g) + " out of range (mesh has " +
           std::to_string(ndims) + " dims)";
  if (g == shardDim_ || g == replicateDim_)
    return who + ": gather_mesh_dim " + std::to_string(g) + " is a data-parallel mesh dim";
  const int32_t t = q.gather_tensor_dim();
  const fb::Placement *pl =
      q.placements() && static_cast<int64_t>(q.placements()->size()) == ndims
          ? q.placements()->Get(static_cast<uint32_t>(g))
          : nullptr;
  if (t < 0 || t >= static_cast<int64_t>(q.shape()->size()) || !pl ||
      pl->kind() != fb::PlacementKind::shard || pl->dim() != t)
    return who + ": gather_tensor_dim " + std::to_string(t) +
           " is not the tensor dim its gather mesh dim " + std::to_string(g) + " shards";
  if (reached(fb::Stage::layout) &&
      (q.compute_index() < 0 || q.compute_index() >= dimSizes_[g]))
    return who + ": compute_index " + std::to_string(q.compute_index()) +
           " out of range (gather mesh dim " + std::to_string(g) + " has size " +
           std::to_string(dimSizes_[g]) + ")";
  return {};
}

std::string Checker::checkUnits() {
  if (!p_.units())
    return {};
  int64_t slots = G_ * R_;
  for (uint32_t i = 0; i < p_.units()->size(); ++i) {
    const fb::Unit *u = p_.units()->Get(i);
    std::string who = "unit " + std::to_string(i) + " '" + str(u->name()) + "'";
    if (auto e = paramList(who, u->params()); !e.empty())
      return e;
    if (auto e = range(who + ": slot", u->slot(), slots, "owner slots", true); !e.empty())
      return e;
  }
  return {};
}

std::string Checker::checkGroups() {
  if (auto e = paramList("no_comm", p_.no_comm()); !e.empty())
    return e;
  if (!p_.comm_groups())
    return {};
  for (uint32_t i = 0; i < p_.comm_groups()->size(); ++i) {
    const fb::CommGroup *g = p_.comm_groups()->Get(i);
    std::string who = "comm group " + std::to_string(i) + " '" + str(g->key()) + "'";
    if (auto e = paramList(who, g->params()); !e.empty())
      return e;
    int64_t ndims = static_cast<int64_t>(dimSizes_.size());
    if (g->replicate_mesh_dims())
      for (int32_t d : *g->replicate_mesh_dims())
        if (auto e = range(who + ": replicate mesh dim", d, ndims, "mesh dims", false);
            !e.empty())
          return e;
    if (g->replicate_groups())
      for (const fb::RankList *rl : *g->replicate_groups()) {
        if (!rl->ranks())
          continue;
        for (int32_t r : *rl->ranks())
          if (r < 0 || r >= world_)
            return who + ": replicate group rank " + std::to_string(r) +
                   " out of range (world size " + std::to_string(world_) + ")";
      }
  }
  return {};
}

std::string Checker::checkHooks() {
  if (complete())
    segmentsOf_.assign(static_cast<size_t>(numParams_), 0);
  for (uint32_t i = 0; i < size(p_.hook_groups()); ++i) {
    const fb::HookGroup *h = p_.hook_groups()->Get(i);
    std::string who = "hook group " + std::to_string(i) + " '" + str(h->name()) + "'";
    if (complete()) {
      if (!h->name() || h->name()->size() == 0)
        return "hook group " + std::to_string(i) + " has no name";
      if (!h->params())
        return who + " has no params vector";
      if (!h->segments())
        return who + " has no segments vector";
    }
    if (auto e = paramList(who, h->params()); !e.empty())
      return e;
    if (h->buffer_bytes() < 0 || h->reduce_buffer_bytes() < 0)
      return who + " has a negative buffer size";
    if (!h->segments())
      continue;
    for (uint32_t j = 0; j < h->segments()->size(); ++j) {
      const fb::Segment *s = h->segments()->Get(j);
      std::string sw = who + " segment " + std::to_string(j);
      if (auto e = paramList(sw, s->params()); !e.empty())
        return e;
      if (s->owner_rank() < 0 || s->owner_rank() >= world_)
        return sw + ": owner_rank " + std::to_string(s->owner_rank()) +
               " out of range (world size " + std::to_string(world_) + ")";
      if (s->owner_shard() < 0 || s->owner_shard() >= G_)
        return sw + ": owner_shard " + std::to_string(s->owner_shard()) +
               " out of range (mesh has " + std::to_string(G_) + " shards)";
      if (s->owner_replicate() < 0 || s->owner_replicate() >= R_)
        return sw + ": owner_replicate " + std::to_string(s->owner_replicate()) +
               " out of range (mesh has " + std::to_string(R_) + " replicas)";
      if (s->offset() < 0 || s->bytes() < 0 || s->offset() > h->buffer_bytes() ||
          s->bytes() > h->buffer_bytes() - s->offset())
        return sw + ": bytes [" + std::to_string(s->offset()) + ", +" +
               std::to_string(s->bytes()) + ") lie outside the buffer of " +
               std::to_string(h->buffer_bytes()) + " bytes";
      if (s->reduce_offset() < 0 || s->reduce_bytes() < 0 ||
          s->reduce_offset() > h->reduce_buffer_bytes() ||
          s->reduce_bytes() > h->reduce_buffer_bytes() - s->reduce_offset())
        return sw + ": reduce bytes [" + std::to_string(s->reduce_offset()) + ", +" +
               std::to_string(s->reduce_bytes()) + ") lie outside the reduce buffer of " +
               std::to_string(h->reduce_buffer_bytes()) + " bytes";
      if (complete())
        if (auto e = checkSegmentParams(*h, i, *s, sw); !e.empty())
          return e;
    }
  }
  if (!complete())
    return {};
  // Every Muon param is moved by exactly one segment (of its own hook group).
  for (int64_t i = 0; i < numParams_; ++i) {
    const fb::Param *q = p_.params()->Get(static_cast<uint32_t>(i));
    if (q->role() == fb::Role::muon && segmentsOf_[static_cast<size_t>(i)] == 0) {
      const fb::HookGroup *h = p_.hook_groups()->Get(static_cast<uint32_t>(q->hook_group()));
      return "param '" + str(q->name()) + "' is in no segment of its hook group " +
             std::to_string(q->hook_group()) + " '" + str(h->name()) + "'";
    }
  }
  return {};
}

// A complete plan's segment: the Muon params of its hook group that its
// owner slot owns, each inside the segment's bytes.
std::string Checker::checkSegmentParams(const fb::HookGroup &h, int64_t hi, const fb::Segment &s,
                                        const std::string &sw) {
  if (!s.params())
    return sw + " has no params vector";
  const int64_t slot = s.owner_shard() + s.owner_replicate() * G_;
  const int64_t want = slotRank(s.owner_shard(), s.owner_replicate());
  if (s.owner_rank() != want)
    return sw + ": owner_rank " + std::to_string(s.owner_rank()) + " is not the rank " +
           std::to_string(want) + " of its owner slot (" + std::to_string(s.owner_shard()) +
           "," + std::to_string(s.owner_replicate()) + ")";
  for (int32_t pi : *s.params()) {
    const fb::Param *q = p_.params()->Get(static_cast<uint32_t>(pi));
    const std::string pw = sw + ": param '" + str(q->name()) + "'";
    if (q->role() != fb::Role::muon)
      return pw + " is not a Muon param";
    if (q->hook_group() != hi)
      return pw + " belongs to hook group " + std::to_string(q->hook_group());
    const int64_t pslot = p_.units()->Get(static_cast<uint32_t>(q->unit()))->slot();
    if (pslot != slot)
      return pw + " is owned by slot " + slotStr(pslot) + ", not the segment's slot " +
             slotStr(slot);
    if (++segmentsOf_[static_cast<size_t>(pi)] > 1)
      return pw + " is listed more than once in the segments of hook group " +
             std::to_string(hi) + " '" + str(h.name()) + "'";
    if (q->offset() < s.offset() || q->bytes() > s.offset() + s.bytes() - q->offset())
      return pw + ": bytes [" + std::to_string(q->offset()) + ", +" +
             std::to_string(q->bytes()) + ") lie outside the segment's [" +
             std::to_string(s.offset()) + ", +" + std::to_string(s.bytes()) + ")";
    if (q->reduce_offset() < s.reduce_offset() ||
        q->reduce_bytes() > s.reduce_offset() + s.reduce_bytes() - q->reduce_offset())
      return pw + ": reduce bytes [" + std::to_string(q->reduce_offset()) + ", +" +
             std::to_string(q->reduce_bytes()) + ") lie outside the segment's [" +
             std::to_string(s.reduce_offset()) + ", +" + std::to_string(s.reduce_bytes()) +
             ")";
  }
  return {};
}

std::string Checker::checkStats() {
  const fb::Stats *s = p_.stats();
  int64_t slots = G_ * R_;
  if (!s) {
    if (reached(fb::Stage::partition))
      return "plan has no stats";
    return {};
  }
  if (!reached(fb::Stage::partition))
    return {};
  if (s->slots() != slots)
    return "stats.slots is " + std::to_string(s->slots()) + ", expected " +
           std::to_string(slots) + " (num_shards*num_replicas)";
  int64_t loads = s->slot_load() ? s->slot_load()->size() : 0;
  if (loads != slots)
    return "stats.slot_load has " + std::to_string(loads) + " entries, expected " +
           std::to_string(slots) + " (num_shards*num_replicas)";
  if (complete() || (s->ranks() && s->ranks()->size() != 0)) {
    if (!s->ranks())
      return "stats.ranks is missing, expected " + std::to_string(world_) +
             " entries (world size)";
    if (static_cast<int64_t>(s->ranks()->size()) != world_)
      return "stats.ranks has " + std::to_string(s->ranks()->size()) +
             " entries, expected " + std::to_string(world_) + " (world size)";
    for (uint32_t i = 0; i < s->ranks()->size(); ++i) {
      const fb::RankFigures *r = s->ranks()->Get(i);
      std::string who = "stats.ranks[" + std::to_string(i) + "]";
      if (r->rank() != static_cast<int32_t>(i))
        return who + " is for rank " + std::to_string(r->rank());
      const std::pair<const char *, int64_t> figures[] = {
          {"owned_params", r->owned_params()},
          {"owned_elements", r->owned_elements()},
          {"master_bytes", r->master_bytes()},
          {"momentum_bytes", r->momentum_bytes()},
          {"peak_buffer_bytes", r->peak_buffer_bytes()},
          {"broadcast_send_bytes", r->broadcast_send_bytes()},
          {"broadcast_recv_bytes", r->broadcast_recv_bytes()},
          {"reduce_send_bytes", r->reduce_send_bytes()},
          {"reduce_recv_bytes", r->reduce_recv_bytes()},
          {"replicate_send_bytes", r->replicate_send_bytes()},
          {"replicate_recv_bytes", r->replicate_recv_bytes()},
          {"allreduce_bytes", r->allreduce_bytes()},
          {"gather_send_bytes", r->gather_send_bytes()},
          {"gather_recv_bytes", r->gather_recv_bytes()},
          {"scatter_send_bytes", r->scatter_send_bytes()},
          {"scatter_recv_bytes", r->scatter_recv_bytes()}};
      for (const auto &[name, value] : figures)
        if (value < 0)
          return who + "." + name + " is negative (" + std::to_string(value) + ")";
    }
  }
  return {};
}

std::string Checker::run(bool requireComplete) {
  if (!enumOk(p_.stage(), fb::Stage::MIN, fb::Stage::MAX))
    return "unknown stage " + std::to_string(static_cast<int>(p_.stage()));
  if (const fb::Options *o = p_.options()) {
    if (!enumOk(o->mode(), fb::Mode::MIN, fb::Mode::MAX))
      return "unknown options.mode " + std::to_string(static_cast<int>(o->mode()));
    if (o->alignment() < 1)
      return "options.alignment is " + std::to_string(o->alignment()) +
             " (must be at least 1)";
    if (const fb::OptimizerDefaults *od = o->optimizer()) {
      if (!enumOk(od->ns_coefficients(), fb::NsCoefficients::MIN, fb::NsCoefficients::MAX))
        return "unknown options.optimizer.ns_coefficients " +
               std::to_string(static_cast<int>(od->ns_coefficients()));
      if (!enumOk(od->lr_scale(), fb::LrScale::MIN, fb::LrScale::MAX))
        return "unknown options.optimizer.lr_scale " +
               std::to_string(static_cast<int>(od->lr_scale()));
    }
  }
  if (p_.stage() == fb::Stage::complete) {
    // The executor reads these without a fallback.
    if (!p_.options())
      return "complete plan has no options";
    const fb::OptimizerDefaults *od = p_.options()->optimizer();
    if (!od)
      return "complete plan has no options.optimizer";
    if (!common::nsStepsInRange(od->ns_steps()))
      return "options.optimizer.ns_steps is " + std::to_string(od->ns_steps()) + " (must be " +
             common::nsStepsRangeText() + ")";
    if (!p_.params())
      return "complete plan has no params";
  }
  if (auto e = checkAlignment(); !e.empty())
    return e;
  if (auto e = checkMesh(); !e.empty())
    return e;
  numParams_ = p_.params() ? p_.params()->size() : 0;
  numUnits_ = p_.units() ? p_.units()->size() : 0;
  numComm_ = p_.comm_groups() ? p_.comm_groups()->size() : 0;
  numHooks_ = p_.hook_groups() ? p_.hook_groups()->size() : 0;
  // Units before params: a complete plan's Muon params follow their unit's slot.
  for (auto check : {&Checker::checkUnits, &Checker::checkParams, &Checker::checkGroups,
                     &Checker::checkHooks, &Checker::checkStats})
    if (auto e = (this->*check)(); !e.empty())
      return e;
  if (requireComplete && p_.stage() != fb::Stage::complete)
    return std::string("plan was captured with --stop-after=") +
           fb::EnumNameStage(p_.stage()) + "; only complete plans can be loaded";
  return {};
}

} // namespace

std::string verifyPlan(const uint8_t *data, size_t size, bool requireComplete) {
  if (!data || size < 8)
    return "truncated plan: " + std::to_string(data ? size : 0) +
           " bytes is too small to be a dmuon plan";
  if (!flatbuffers::BufferHasIdentifier(data, fb::PlanIdentifier()))
    return "not a dmuon plan (file identifier is not DMPL)";
  if (size >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return "plan is too large (" + std::to_string(size) + " bytes)";
  flatbuffers::Verifier::Options vo;
  // Room for 100k-param plans (a table per param and per placement, segments,
  // units) with a wide margin; the depth of the schema is below 8.
  vo.max_depth = 32;
  vo.max_tables = 64u * 1024u * 1024u;
  flatbuffers::Verifier verifier(data, size, vo);
  if (!fb::VerifyPlanBuffer(verifier))
    return "corrupt plan: FlatBuffers verification failed";
  const fb::Plan *plan = fb::GetPlan(data);
  unsigned major = plan->format_major(), minor = plan->format_minor();
  if (major != DMUON_PLAN_FORMAT_MAJOR) {
    std::string v = std::to_string(major) + "." + std::to_string(minor);
    std::string ours = std::to_string(DMUON_PLAN_FORMAT_MAJOR) + ".x";
    if (major > DMUON_PLAN_FORMAT_MAJOR)
      return "plan format " + v + " is newer than this reader (" + ours +
             "); rebuild with a newer dmuon";
    return "plan format " + v + " is older than this reader (" + ours +
           "); recompile the plan with this dmuonc";
  }
  uint64_t fp;
  if (!computeFingerprint(data, size, fp))
    return "corrupt plan: the fingerprint field is missing";
  if (fp != plan->fingerprint())
    return "fingerprint mismatch: plan says " + hex64(plan->fingerprint()) +
           ", contents hash to " + hex64(fp) + " (file modified or corrupt)";
  return Checker(*plan, data).run(requireComplete);
}

} // namespace dmuon::planfile
