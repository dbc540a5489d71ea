// Verify-before-read for plan buffers (PlanVerifier.h): identifier, size,
// FlatBuffers verifier, format version and fingerprint here, then the
// semantic checks of PlanChecker.h. Nothing here reads outside the buffer,
// whatever its contents (FlatBuffers' verifier runs before any accessor, and
// every index is range-checked before it is followed).
#include "plan/verify/PlanVerifier.h"

#include "common/Hex.h"
#include "common/HyperRanges.h"
#include "common/PlanRules.h"
#include "dmuon/plan_version.h"
#include "plan/Features.h"
#include "plan/Fingerprint.h"
#include "plan/verify/PlanChecker.h"

#include <tuple>

namespace dmuon::planfile {

namespace detail {

std::string Checker::run(bool requireComplete) {
  if (auto e = checkStrings(); !e.empty())
    return e;
  if (!enumOk(p_.stage(), plan::Stage::MIN, plan::Stage::MAX))
    return "unknown stage " + std::to_string(static_cast<int>(p_.stage()));
  if (const plan::Options *o = p_.options()) {
    if (!enumOk(o->mode(), plan::Mode::MIN, plan::Mode::MAX))
      return "unknown options.mode " + std::to_string(static_cast<int>(o->mode()));
    if (o->alignment() < 1)
      return "options.alignment is " + std::to_string(o->alignment()) + " (must be at least 1)";
    if (const plan::OptimizerDefaults *od = o->optimizer()) {
      if (!enumOk(od->ns_coefficients(), plan::NsCoefficients::MIN, plan::NsCoefficients::MAX))
        return "unknown options.optimizer.ns_coefficients " +
               std::to_string(static_cast<int>(od->ns_coefficients()));
      if (!enumOk(od->lr_scale(), plan::LrScale::MIN, plan::LrScale::MAX))
        return "unknown options.optimizer.lr_scale " +
               std::to_string(static_cast<int>(od->lr_scale()));
      // The runtime applies these unless its options override them.
      const std::tuple<const char *, double, const common::HyperRange &> hypers[] = {
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  {"options.optimizer." #name, od->name(), common::range},
#define DMUON_HYPER_FIXED DMUON_HYPER_SCHEDULED
#include "common/HyperParams.def"
      };
      for (const auto &[name, value, range] : hypers)
        if (std::string e = common::hyperRangeError(name, value, range); !e.empty())
          return e;
      for (const auto &[name, f] :
           {std::pair{"soap_precondition_frequency", od->soap_precondition_frequency()},
            std::pair{"shampoo_precondition_frequency", od->shampoo_precondition_frequency()}})
        if (!common::preconditionFrequencyInRange(f))
          return "options.optimizer." + std::string(name) + " is " + std::to_string(f) +
                 " (must be " + common::preconditionFrequencyRangeText() + ")";
      for (const auto &[name, d] :
           {std::pair{"soap_max_precond_dim", od->soap_max_precond_dim()},
            std::pair{"shampoo_max_preconditioner_dim", od->shampoo_max_preconditioner_dim()}})
        if (!common::maxPreconditionDimInRange(d))
          return "options.optimizer." + std::string(name) + " is " + std::to_string(d) +
                 " (must be " + common::maxPreconditionDimRangeText() + ")";
    }
  }
  if (p_.stage() == plan::Stage::complete) {
    // The executor reads these without a fallback.
    if (!p_.options())
      return "complete plan has no options";
    const plan::OptimizerDefaults *od = p_.options()->optimizer();
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
                     &Checker::checkPipelineStages, &Checker::checkHooks, &Checker::checkStats,
                     &Checker::checkQkClip, &Checker::checkBuffers})
    if (auto e = (this->*check)(); !e.empty())
      return e;
  if (requireComplete && p_.stage() != plan::Stage::complete)
    return std::string("plan was captured with --stop-after=") + plan::EnumNameStage(p_.stage()) +
           "; only complete plans can be loaded";
  return {};
}

// The FlatBuffers verifier checks a vector's length prefix for 4-byte
// alignment only; 8-byte elements must be 8-aligned before they are read.
std::string Checker::checkAlignment() {
  // (An empty vector is not aligned by the builder, and nothing is read from it.)
  auto misaligned = [&](const auto *v) {
    return v->size() != 0 &&
           (reinterpret_cast<uintptr_t>(v->Data()) - reinterpret_cast<uintptr_t>(base_)) % 8 != 0;
  };
  for (uint32_t i = 0; i < size(p_.params()); ++i) {
    const plan::Param *q = p_.params()->Get(i);
    if (q->shape() && misaligned(q->shape()))
      return "corrupt plan: param #" + std::to_string(i) + " has a misaligned shape vector";
    if (q->local_shape() && misaligned(q->local_shape()))
      return "corrupt plan: param #" + std::to_string(i) + " has a misaligned local_shape vector";
  }
  if (p_.stats() && p_.stats()->slot_load() && misaligned(p_.stats()->slot_load()))
    return "corrupt plan: stats.slot_load is misaligned";
  if (p_.stats() && p_.stats()->slot_load_run_values() &&
      misaligned(p_.stats()->slot_load_run_values()))
    return "corrupt plan: stats.slot_load_run_values is misaligned";
  return {};
}

std::string Checker::checkMesh() {
  const plan::Mesh *m = p_.mesh();
  if (!m)
    return "plan has no mesh";
  if (!m->dims() || m->dims()->size() == 0)
    return "mesh has no dims";
  constexpr int64_t kMaxWorld = common::kMaxWorldSize;
  int64_t product = 1;
  for (uint32_t i = 0; i < m->dims()->size(); ++i) {
    const plan::MeshDim *d = m->dims()->Get(i);
    std::string name = str(d->name());
    if (name.empty())
      return "mesh dim " + std::to_string(i) + " has no name";
    if (d->size() < 1)
      return "mesh dim '" + name + "' has size " + std::to_string(d->size()) +
             " (must be at least 1)";
    product *= d->size();
    if (product > kMaxWorld)
      return "mesh has more than " + std::to_string(kMaxWorld) + " ranks";
  }
  if (m->world_size() != product)
    return "mesh world_size is " + std::to_string(m->world_size()) + " but its dims multiply to " +
           std::to_string(product);
  int n = static_cast<int>(m->dims()->size());
  if (m->shard_dim() < -1 || m->shard_dim() >= n)
    return "mesh shard_dim " + std::to_string(m->shard_dim()) + " out of range (mesh has " +
           std::to_string(n) + " dims)";
  if (m->replicate_dim() < -1 || m->replicate_dim() >= n)
    return "mesh replicate_dim " + std::to_string(m->replicate_dim()) + " out of range (mesh has " +
           std::to_string(n) + " dims)";
  if (m->shard_dim() >= 0 && m->shard_dim() == m->replicate_dim())
    return "mesh shard_dim and replicate_dim are both " + std::to_string(m->shard_dim());
  const int shardDim = m->shard_dim(), replicateDim = m->replicate_dim();
  auto sizeOf = [&](int i) { return m->dims()->Get(static_cast<uint32_t>(i))->size(); };
  int64_t g = shardDim < 0 ? 1 : sizeOf(shardDim);
  int64_t r = replicateDim < 0 ? 1 : sizeOf(replicateDim);
  if (m->num_shards() != g)
    return "mesh num_shards is " + std::to_string(m->num_shards()) + ", expected " +
           std::to_string(g) + " (the size of its shard dim)";
  if (m->num_replicas() != r)
    return "mesh num_replicas is " + std::to_string(m->num_replicas()) + ", expected " +
           std::to_string(r) + " (the size of its replicate dim)";
  for (int i = 0; i < n; ++i)
    if (m->dims()->Get(static_cast<uint32_t>(i))->carries_data() &&
        (i == shardDim || i == replicateDim))
      return "mesh dim '" + str(m->dims()->Get(static_cast<uint32_t>(i))->name()) +
             "' is an ownership dim and cannot carry data";
  // 1.9: at most one stage dim, a model-parallel dim that carries no data,
  // and num_stages its size.
  const int stageDim = m->stage_dim();
  if (stageDim < -1 || stageDim >= n)
    return "mesh stage_dim " + std::to_string(stageDim) + " out of range (mesh has " +
           std::to_string(n) + " dims)";
  for (int i = 0; i < n; ++i) {
    const plan::MeshDim *d = m->dims()->Get(static_cast<uint32_t>(i));
    if (d->is_stage() != (i == stageDim))
      return "mesh dim '" + str(d->name()) + "' is_stage is " + (d->is_stage() ? "true" : "false") +
             " but the mesh's stage_dim is " + std::to_string(stageDim);
  }
  if (stageDim >= 0) {
    const plan::MeshDim *d = m->dims()->Get(static_cast<uint32_t>(stageDim));
    if (stageDim == shardDim || stageDim == replicateDim || d->carries_data())
      return "mesh stage dim '" + str(d->name()) +
             "' must be a model-parallel dim that carries no data";
  }
  const int64_t stages = stageDim < 0 ? 1 : sizeOf(stageDim);
  if (m->num_stages() != stages)
    return "mesh num_stages is " + std::to_string(m->num_stages()) + ", expected " +
           std::to_string(stages) + (stageDim < 0 ? " (no stage dim)" : " (its stage dim's size)");
  // Now what every later check reads the mesh through (owners pick
  // coordinates on the data-carrying dims from 1.4 on: PlanView::D).
  mesh_ = PlanView(p_);
  return {};
}

} // namespace detail

std::string verifyPlan(const uint8_t *data, size_t size, bool requireComplete,
                       bool checkFingerprint) {
  if (!data || size < 8)
    return "truncated plan: " + std::to_string(data ? size : 0) +
           " bytes is too small to be a dmuon plan";
  if (!flatbuffers::BufferHasIdentifier(data, plan::PlanIdentifier()))
    return "not a dmuon plan (file identifier is not DMPL)";
  if (size >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return "plan is too large (" + std::to_string(size) + " bytes)";
  flatbuffers::Verifier::Options vo;
  // Room for 100k-param plans (a table per param and per placement, segments,
  // units) with a wide margin; the depth of the schema is below 8.
  vo.max_depth = 32;
  vo.max_tables = 64u * 1024u * 1024u;
  flatbuffers::Verifier verifier(data, size, vo);
  if (!plan::VerifyPlanBuffer(verifier))
    return "corrupt plan: FlatBuffers verification failed";
  const plan::Plan *plan = plan::GetPlan(data);
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
  uint64_t fp = plan->fingerprint();
  if (checkFingerprint && !computeFingerprint(data, size, fp))
    return "corrupt plan: the fingerprint field is missing";
  if (fp != plan->fingerprint())
    return "fingerprint mismatch: plan says " + common::hex64(plan->fingerprint()) +
           ", contents hash to " + common::hex64(fp) + " (file modified or corrupt)";
  return detail::Checker(*plan, data).run(requireComplete);
}

} // namespace dmuon::planfile
