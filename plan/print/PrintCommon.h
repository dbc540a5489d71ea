// What the printers (PlanPrinter.h) share: number formatting, a read-only
// view of a plan with bounds-checked lookups, and the facts every form needs.
//
// Output is a pure function of the buffer: numbers go through std::to_chars
// (locale-free, shortest round trip), lists are printed in plan order, and
// fields the plan's stage has not computed yet are left out. The printers
// never index past a vector: a plan that was not verified prints '?' where an
// index is out of range instead of crashing.
#ifndef DMUON_PLAN_PRINT_PRINTCOMMON_H
#define DMUON_PLAN_PRINT_PRINTCOMMON_H

#include "common/Hex.h"
#include "common/PlanAccess.h"
#include "common/RankRows.h"
#include "common/SlotLoads.h"
#include "common/ReplicateGroups.h"
#include "common/Routes.h"
#include "dmuon/plan_generated.h"
#include "plan/PlanView.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dmuon::planfile::print {

using common::hex64;
using common::size;
using common::str;

// ---------------------------------------------------------------- numbers

std::string num(int64_t v);
// Shortest round-trip, fixed notation; "0" for zero (and negative zero).
std::string num(double v);
// Fixed notation with 4 decimals.
std::string fixed4(double v);
// "512 B", "1.50 KiB", ... up to the unit `largest` (0 = B, 1 = KiB, ...,
// 6 = EiB), with 2 decimals past bytes.
std::string humanBytes(double bytes, int largest);

inline std::string orDash(const std::string &s) { return s.empty() ? "-" : s; }
inline const char *boolName(bool b) { return b ? "true" : "false"; }

// ---------------------------------------------------------------- plan facts

inline bool reached(const plan::Plan &p, plan::Stage s) {
  return static_cast<int>(p.stage()) >= static_cast<int>(s);
}
// The plan's stage by name, "?" for a value the schema does not know.
std::string stageName(const plan::Plan &p);

template <typename E, typename F> std::string enumName(E e, F nameFn) {
  const char *n = nameFn(e);
  return (n && *n) ? n : "?";
}

// The spelling users write: Shard(0), Replicate, ...
std::string placementString(const plan::Placement &pl);

inline bool recovered(const plan::Param &q) {
  return q.name_origin() == plan::NameOrigin::recovered_from_node;
}
inline bool isMuon(const plan::Param &q) { return q.role() == plan::Role::muon; }
// Whether a matrix param of `plan` runs `rule`: a rule's hyper-parameters
// are printed only where it runs, so plans without it print as before 1.7.
inline bool runsRule(const plan::Plan &plan, plan::MatrixOptimizer rule) {
  for (flatbuffers::uoffset_t i = 0; plan.params() && i < plan.params()->size(); ++i) {
    const plan::Param *q = plan.params()->Get(i);
    if (q && isMuon(*q) && q->matrix_optimizer() == rule)
      return true;
  }
  return false;
}
// The route the plan means (1.2 plans: AdamW params replicated).
inline plan::Route routeOf(const plan::Param &q) { return common::effectiveRoute(q); }
// Owned by one slot: Muon params and owner-routed AdamW params.
inline bool ownerRouted(const plan::Param &q) { return routeOf(q) == plan::Route::owner; }
// --adamw-route's spelling of a policy.
inline std::string routePolicyName(plan::RoutePolicy p) {
  return p == plan::RoutePolicy::by_size ? "auto" : enumName(p, plan::EnumNameRoutePolicy);
}
// A comm param that gathers over a model-parallel mesh dim for NS.
inline bool gathers(const plan::Param &q) {
  return q.group() == plan::ShardingGroupKind::comm && q.gather_mesh_dim() >= 0;
}
// local_shape, when the plan has it and it differs from shape.
bool localDiffers(const plan::Param &q);

// The smallest slice a rank holds, per dim, where a model-parallel split is
// uneven (common/ShardChunks.h; local_shape is the largest); empty when
// every rank's slice is local_shape.
std::vector<int64_t> smallestLocalShape(const plan::Param &q, const plan::Mesh *mesh);

// The plan's mesh (plan/PlanView.h) with what the printers spell of it.
struct MeshView : PlanView {
  explicit MeshView(const plan::Plan &p) : PlanView(p) {}

  // Data index d's coordinates on `onDims` as " data=(ep=1)" or
  // " data=(ep=1,cp=0)"; empty without such dims.
  std::string dataString(int64_t d, const flatbuffers::Vector<int32_t> *onDims) const;
  // "dp_replicate=2,dp_shard=4"
  std::string meshString() const;
  // "(1,0,3)": the coordinate of a rank.
  std::string coords(int64_t rank) const;
  std::string dimName(int64_t i) const {
    return i >= 0 && i < static_cast<int64_t>(dimNames.size()) ? dimNames[i] : "?";
  }
  std::string shardName() const { return shardDim >= 0 ? dimNames[shardDim] : "dp_shard"; }
  std::string replicateName() const {
    return replicateDim >= 0 ? dimNames[replicateDim] : "dp_replicate";
  }
};

// The most ranks (or lines) one listing of the text and JSON forms shows; a
// longer one is cut there with a note, so that a plan for 2^24 ranks prints
// in moments instead of gigabytes.
constexpr int64_t kMaxListed = 4096;

// A comm group's replicate groups as the text and JSON forms list them: as
// stored (plans before 1.5), else derived from its replicate mesh dims;
// whole groups while they fit in kMaxListed ranks, else cut there (`cut`).
struct ListedReplicateGroups {
  std::vector<std::vector<int64_t>> groups;
  int64_t count = 0; // groups in all
  int64_t size = 0;  // ranks per group
  bool cut = false;
};
ListedReplicateGroups listReplicateGroups(const MeshView &m, const plan::CommGroup &g);

// A plan with its mesh and bounds-checked lookups of params and hook groups.
class View : public MeshView {
public:
  explicit View(const plan::Plan &p) : MeshView(p), p(p) {}

  bool reached(plan::Stage s) const { return print::reached(p, s); }
  std::string stageName() const { return print::stageName(p); }
  std::string version() const {
    return std::to_string(p.format_major()) + "." + std::to_string(p.format_minor());
  }
  // A unit's pipeline stage: its params' (1.9; 0 without a stage dim).
  int64_t unitStage(const plan::Unit &u) const {
    const plan::Param *q =
        u.params() && u.params()->size() > 0 ? param(u.params()->Get(0)) : nullptr;
    return q ? q->pipeline_stage() : 0;
  }
  const plan::Param *param(int64_t i) const {
    if (i < 0 || i >= size(p.params()))
      return nullptr;
    return p.params()->Get(static_cast<uint32_t>(i));
  }
  std::string paramName(int64_t i) const {
    const plan::Param *q = param(i);
    return q ? str(q->name()) : "?";
  }
  std::string hookName(int64_t i) const {
    if (i < 0 || i >= size(p.hook_groups()))
      return "?";
    return str(p.hook_groups()->Get(static_cast<uint32_t>(i))->name());
  }
  int64_t worldSize() const { return p.mesh() ? p.mesh()->world_size() : 0; }

  const plan::Plan &p;
};

} // namespace dmuon::planfile::print

#endif
