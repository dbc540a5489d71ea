// The verifier's semantic checks (PlanVerifier.h), private to plan/verify:
// one Checker per buffer that FlatBuffers' verifier has accepted. Its checks
// live by subject in PlanVerifier.cpp (options, alignment, mesh),
// CheckParams.cpp (params) and CheckGroups.cpp (units, comm and hook groups,
// stats). Every check returns a message that names the field, param and
// value at fault, or an empty string.
#ifndef DMUON_PLAN_VERIFY_PLANCHECKER_H
#define DMUON_PLAN_VERIFY_PLANCHECKER_H

#include "common/FirstSeenTable.h"
#include "common/MeshIndex.h"
#include "common/PlanAccess.h"
#include "dmuon/plan_generated.h"
#include "plan/PlanView.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dmuon::planfile::detail {

using common::size;
using common::str;

template <typename E> bool enumOk(E e, E lo, E hi) { return !flatbuffers::IsOutRange(e, lo, hi); }

// What a message is about ("param 'w'", "hook group 2 segment 5"), spelled
// only when a check fails: the checks run for every param, unit and segment
// (tens of thousands of each in the largest models), and building each name
// up front would cost more than the checks. Refers to a string or a
// callable that outlives it.
class Who {
public:
  Who(const std::string &text) : obj_(&text), spell_(&spellString) {}
  Who(const char *text) : obj_(text), spell_(&spellChars) {}
  template <typename F, typename = decltype(std::string(std::declval<const F &>()()))>
  Who(const F &f)
      : obj_(&f), spell_([](const void *o) { return (*static_cast<const F *>(o))(); }) {}
  std::string operator()() const { return spell_(obj_); }
  friend std::string operator+(const Who &w, const char *s) { return w() + s; }
  friend std::string operator+(const Who &w, const std::string &s) { return w() + s; }

private:
  static std::string spellString(const void *o) { return *static_cast<const std::string *>(o); }
  static std::string spellChars(const void *o) { return static_cast<const char *>(o); }
  const void *obj_;
  std::string (*spell_)(const void *);
};

// Semantic checks on a buffer the FlatBuffers verifier has accepted.
class Checker {
public:
  Checker(const plan::Plan &p, const uint8_t *base) : p_(p), base_(base) {}
  std::string run(bool requireComplete);

private:
  std::string checkStrings(); // CheckStrings.cpp
  std::string checkAlignment();
  std::string checkMesh();
  std::string checkParams(); // CheckParams.cpp, with the five below
  std::string checkParamName(uint32_t i, const plan::Param &q,
                             std::optional<common::FirstSeenTable> &byName);
  std::string checkParam(const plan::Param &q, const Who &who);
  std::string checkRoutingFields(const plan::Param &q, const Who &who) const;
  std::string checkOwner(const plan::Param &q, const Who &who) const;
  std::string checkParamBytes(const plan::Param &q, const Who &who) const;
  std::string checkModelParallel(const plan::Param &q, const Who &who);
  std::string checkCompleteParam(const plan::Param &q, const Who &who);
  std::string checkShardedParam(const plan::Param &q, int64_t local, const Who &who);
  std::string checkSegmentParams(const plan::HookGroup &h, int64_t hi, const plan::Segment &s,
                                 const Who &sw);
  std::string checkUnits();
  std::string checkGroups();
  std::string checkHooks();
  std::string checkRankRows();
  std::string checkStats();
  std::string checkPipelineStages(); // CheckStages.cpp
  std::string checkQkClip();         // CheckQkClip.cpp
  std::string checkBuffers();        // CheckParams.cpp

  // The executor's own invariants, checked on complete plans only (a
  // --stop-after plan is printed, never executed).
  bool complete() const { return p_.stage() == plan::Stage::complete; }
  std::string slotStr(int64_t slot) const {
    return std::to_string(slot) + " (" + std::to_string(slot % mesh_.G) + "," +
           std::to_string(slot / mesh_.G) + ")";
  }
  bool reached(plan::Stage s) const { return static_cast<int>(p_.stage()) >= static_cast<int>(s); }
  // "'<what>' index <i> out of range (plan has <n> <things>)" or empty.
  static std::string range(const std::string &what, int64_t i, int64_t n, const char *things,
                           bool allowNone) {
    if ((allowNone && i == -1) || (i >= 0 && i < n))
      return {};
    return what + " " + std::to_string(i) + " out of range (plan has " + std::to_string(n) + " " +
           things + ")";
  }
  // The same for "<who><field>".
  static std::string range(const Who &who, const char *field, int64_t i, int64_t n,
                           const char *things, bool allowNone) {
    if ((allowNone && i == -1) || (i >= 0 && i < n))
      return {};
    return range(who + field, i, n, things, allowNone);
  }
  std::string paramList(const Who &where, const flatbuffers::Vector<int32_t> *list) const {
    if (!list)
      return {};
    for (int32_t i : *list)
      if (std::string e = range(where, ": param index", i, numParams_, "params", false); !e.empty())
        return e;
    return {};
  }

  const plan::Plan &p_;
  const uint8_t *base_;
  // The mesh, once checkMesh has passed it.
  PlanView mesh_;
  int64_t numParams_ = 0, numUnits_ = 0, numComm_ = 0, numHooks_ = 0;
  // Complete plans: how many segments list each param.
  std::vector<int> segmentsOf_;
  int64_t adamwElements_ = 0;

  int64_t ownerRank(int64_t s, int64_t r, int64_t d, int64_t stage) const {
    return common::stageOwnerRank(
        mesh_.dims, mesh_.shardDim, mesh_.replicateDim, mesh_.stageDim, stage,
        [&](int i) { return mesh_.carriesData[i]; }, s, r, d);
  }
  std::string dataIndexInRange(const Who &who, int64_t d) const {
    if (d < 0 || d >= mesh_.D)
      return who + ": data index " + std::to_string(d) + " out of range (plan has " +
             std::to_string(mesh_.D) + (mesh_.D == 1 ? " data index)" : " data indices)");
    return {};
  }
  // The owner fields of a param or segment: "<who>: owner_rank 9 out of
  // range (world size 8)" and the like, or empty.
  std::string ownerRankInRange(const Who &who, int64_t rank) const {
    if (rank < 0 || rank >= mesh_.ranks())
      return who + ": owner_rank " + std::to_string(rank) + " out of range (world size " +
             std::to_string(mesh_.ranks()) + ")";
    return {};
  }
  std::string ownerSlotInRange(const Who &who, int64_t shard, int64_t replicate) const {
    if (shard < 0 || shard >= mesh_.G)
      return who + ": owner_shard " + std::to_string(shard) + " out of range (mesh has " +
             std::to_string(mesh_.G) + " shards)";
    if (replicate < 0 || replicate >= mesh_.R)
      return who + ": owner_replicate " + std::to_string(replicate) + " out of range (mesh has " +
             std::to_string(mesh_.R) + " replicas)";
    return {};
  }
  // The owner rank is the rank of the owner (shard, replicate, data index)
  // on the pipeline stage that holds the param.
  std::string ownerRankMatchesSlot(const Who &who, int64_t rank, int64_t shard, int64_t replicate,
                                   int64_t dataIndex, int64_t stage) const {
    const int64_t want = ownerRank(shard, replicate, dataIndex, stage);
    if (rank != want)
      return who + ": owner_rank " + std::to_string(rank) + " is not the rank " +
             std::to_string(want) + " of its owner slot (" + std::to_string(shard) + "," +
             std::to_string(replicate) +
             (mesh_.D > 1 ? ", data index " + std::to_string(dataIndex) : std::string()) +
             (mesh_.P > 1 ? ", stage " + std::to_string(stage) : std::string()) + ")";
    return {};
  }
  // The data-carrying dims a param is Replicate on, ascending: what its
  // data_dims must say (1.4 on).
  std::vector<int> expectedDataDims(const plan::Param &q) const {
    std::vector<int> dims;
    const auto *pls = q.placements();
    for (size_t d = 0; d < mesh_.carriesData.size(); ++d)
      if (mesh_.carriesData[d] && pls && d < pls->size() &&
          pls->Get(static_cast<uint32_t>(d))->kind() == plan::PlacementKind::replicate)
        dims.push_back(static_cast<int>(d));
    return dims;
  }
  std::string checkDataDims(const plan::Param &q, const Who &who) const;
};

} // namespace dmuon::planfile::detail

#endif
