// The verifier's checks of units, comm groups, hook groups with their
// segments, and stats (PlanChecker.h).
#include "plan/verify/PlanChecker.h"

#include "common/PlanRules.h"
#include "common/RankRows.h"
#include "common/Routes.h"
#include "plan/Features.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace dmuon::planfile::detail {

std::string Checker::checkUnits() {
  if (!p_.units())
    return {};
  int64_t slots = mesh_.slots();
  for (uint32_t i = 0; i < p_.units()->size(); ++i) {
    const plan::Unit *u = p_.units()->Get(i);
    auto unitName = [&] { return "unit " + std::to_string(i) + " '" + str(u->name()) + "'"; };
    const Who who(unitName);
    if (auto e = paramList(who, u->params()); !e.empty())
      return e;
    if (auto e = range(who, ": slot", u->slot(), slots, "owner slots", true); !e.empty())
      return e;
    if (auto e = dataIndexInRange(who, u->data_index()); !e.empty())
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
    const plan::CommGroup *g = p_.comm_groups()->Get(i);
    std::string who = "comm group " + std::to_string(i) + " '" + str(g->key()) + "'";
    if (auto e = paramList(who, g->params()); !e.empty())
      return e;
    int64_t ndims = static_cast<int64_t>(mesh_.dims.size());
    if (g->replicate_mesh_dims())
      for (int32_t d : *g->replicate_mesh_dims())
        if (auto e = range(who, ": replicate mesh dim", d, ndims, "mesh dims", false);
            !e.empty())
          return e;
    if (g->replicate_groups())
      for (const plan::RankList *rl : *g->replicate_groups()) {
        if (!rl->ranks())
          continue;
        for (int32_t r : *rl->ranks())
          if (r < 0 || r >= mesh_.ranks())
            return who + ": replicate group rank " + std::to_string(r) +
                   " out of range (world size " + std::to_string(mesh_.ranks()) + ")";
      }
  }
  return {};
}

std::string Checker::checkHooks() {
  if (complete())
    segmentsOf_.assign(static_cast<size_t>(numParams_), 0);
  for (uint32_t i = 0; i < size(p_.hook_groups()); ++i) {
    const plan::HookGroup *h = p_.hook_groups()->Get(i);
    // Spelled only for a message: a plan of 1M params has as many groups.
    auto groupName = [&] {
      return "hook group " + std::to_string(i) + " '" + str(h->name()) + "'";
    };
    const Who who(groupName);
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
    // Offsets and sizes inside the buffers are at most these: their sums
    // stay in 64 bits.
    if (h->buffer_bytes() > common::kMaxPlanByteCount ||
        h->reduce_buffer_bytes() > common::kMaxPlanByteCount)
      return who + " has a buffer of more than 2^62 bytes (" +
             std::to_string(std::max(h->buffer_bytes(), h->reduce_buffer_bytes())) + ")";
    if (!h->segments())
      continue;
    for (uint32_t j = 0; j < h->segments()->size(); ++j) {
      const plan::Segment *s = h->segments()->Get(j);
      auto segmentName = [&] { return who + " segment " + std::to_string(j); };
      const Who sw(segmentName);
      if (auto e = paramList(sw, s->params()); !e.empty())
        return e;
      if (auto e = ownerRankInRange(sw, s->owner_rank()); !e.empty())
        return e;
      if (auto e = ownerSlotInRange(sw, s->owner_shard(), s->owner_replicate()); !e.empty())
        return e;
      auto ownerName = [&] { return sw + ": owner"; };
      if (auto e = dataIndexInRange(ownerName, s->owner_data_index()); !e.empty())
        return e;
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
  // Every owner-routed param is moved by exactly one segment (of its own
  // hook group).
  for (int64_t i = 0; i < numParams_; ++i) {
    const plan::Param *q = p_.params()->Get(static_cast<uint32_t>(i));
    if (common::effectiveRoute(*q) == plan::Route::owner &&
        segmentsOf_[static_cast<size_t>(i)] == 0) {
      const plan::HookGroup *h = p_.hook_groups()->Get(static_cast<uint32_t>(q->hook_group()));
      return "param '" + str(q->name()) + "' is in no segment of its hook group " +
             std::to_string(q->hook_group()) + " '" + str(h->name()) + "'";
    }
  }
  return {};
}

// A complete plan's segment: the owner-routed params of its hook group that
// its owner slot owns, each inside the segment's bytes.
std::string Checker::checkSegmentParams(const plan::HookGroup &h, int64_t hi, const plan::Segment &s,
                                        const Who &sw) {
  if (!s.params())
    return sw + " has no params vector";
  const int64_t slot = s.owner_shard() + s.owner_replicate() * mesh_.G;
  if (auto e = ownerRankMatchesSlot(sw, s.owner_rank(), s.owner_shard(), s.owner_replicate(),
                                    s.owner_data_index(), h.pipeline_stage());
      !e.empty())
    return e;
  // One reduce and replicate group per segment: its params share data_dims.
  const flatbuffers::Vector<int32_t> *segDataDims = nullptr;
  bool first = true;
  for (int32_t pi : *s.params()) {
    const plan::Param *q = p_.params()->Get(static_cast<uint32_t>(pi));
    auto paramName = [&] { return sw + ": param '" + str(q->name()) + "'"; };
    const Who pw(paramName);
    if (common::effectiveRoute(*q) != plan::Route::owner)
      return pw + " does not travel the owner route";
    if (q->hook_group() != hi)
      return pw + " belongs to hook group " + std::to_string(q->hook_group());
    const plan::Unit *u = p_.units()->Get(static_cast<uint32_t>(q->unit()));
    const int64_t pslot = u->slot();
    if (pslot != slot)
      return pw + " is owned by slot " + slotStr(pslot) + ", not the segment's slot " +
             slotStr(slot);
    if (u->data_index() != s.owner_data_index())
      return pw + " is owned at data index " + std::to_string(u->data_index()) +
             ", not the segment's " + std::to_string(s.owner_data_index());
    auto sameDims = [](const flatbuffers::Vector<int32_t> *a,
                       const flatbuffers::Vector<int32_t> *b) {
      return size(a) == size(b) && (size(a) == 0 || std::equal(a->begin(), a->end(), b->begin()));
    };
    if (first)
      segDataDims = q->data_dims(), first = false;
    else if (!sameDims(segDataDims, q->data_dims()))
      return pw + " has other data_dims than the segment's first param";
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
  const plan::Stats *s = p_.stats();
  const int64_t slots = mesh_.fineSlots();
  const std::string slotsWhy =
      mesh_.D > 1 ? " (num_shards*num_replicas*" + std::to_string(mesh_.D) + " data indices)"
             : " (num_shards*num_replicas)";
  // 1.9: each pipeline stage's fine slots, one stage after another.
  const int64_t loadEntries = slots * mesh_.P;
  const std::string loadsWhy =
      mesh_.P > 1 ? " (stats.slots per stage, " + std::to_string(mesh_.P) + " pipeline stages)"
                  : slotsWhy;
  if (!s) {
    if (reached(plan::Stage::partition))
      return "plan has no stats";
    return {};
  }
  if (!reached(plan::Stage::partition))
    return {};
  if (s->slots() != slots)
    return "stats.slots is " + std::to_string(s->slots()) + ", expected " +
           std::to_string(slots) + slotsWhy;
  if (planHas(p_, PlanFeature::LoadRuns)) {
    // 1.6: runs of equal loads (common/SlotLoads.h).
    if (s->slot_load() && s->slot_load()->size() != 0)
      return "stats.slot_load is set in a plan of format 1.6 or later, which stores the slot "
             "loads as runs (stats.slot_load_run_lengths, stats.slot_load_run_values)";
    const auto *len = s->slot_load_run_lengths();
    const auto *val = s->slot_load_run_values();
    const uint32_t n = len ? len->size() : 0;
    if (!val || val->size() != n)
      return "stats.slot_load_run_values has " + std::to_string(val ? val->size() : 0) +
             " entries, expected " + std::to_string(n) + " (one per run)";
    int64_t covered = 0;
    for (uint32_t i = 0; i < n; ++i) {
      auto runName = [&] { return "stats.slot_load run " + std::to_string(i); };
      const Who who(runName);
      if (len->Get(i) < 1)
        return who + " has length " + std::to_string(len->Get(i)) + " (must be >= 1)";
      if (!std::isfinite(val->Get(i)) || val->Get(i) < 0)
        return who + " has load " + std::to_string(val->Get(i)) + " (must be finite and >= 0)";
      if (i > 0 && val->Get(i) == val->Get(i - 1))
        return who + " has the load of the run before it (adjacent runs must differ)";
      covered += len->Get(i);
    }
    if (covered != loadEntries)
      return "stats.slot_load runs cover " + std::to_string(covered) + " fine slots, expected " +
             std::to_string(loadEntries) + loadsWhy;
    return checkRankRows();
  }
  int64_t loads = s->slot_load() ? s->slot_load()->size() : 0;
  if (loads != slots)
    return "stats.slot_load has " + std::to_string(loads) + " entries, expected " +
           std::to_string(slots) + slotsWhy;
  return checkRankRows();
}

// Format 1.6 stores runs of equal figures (stats.rank_runs), older plans one
// row per rank (stats.ranks); common/RankRows.h reads either.
std::string Checker::checkRankRows() {
  const plan::Stats *s = p_.stats();
  const bool runs = planHas(p_, PlanFeature::LoadRuns);
  const auto *rows = runs ? s->rank_runs() : s->ranks();
  const auto *other = runs ? s->ranks() : s->rank_runs();
  const char *field = runs ? "stats.rank_runs" : "stats.ranks";
  if (other && other->size() != 0)
    return std::string(runs ? "stats.ranks" : "stats.rank_runs") + " is set in a plan of format " +
           std::to_string(p_.format_major()) + "." + std::to_string(p_.format_minor()) +
           ", which stores the per-rank figures in " + field;
  if (complete() || (rows && rows->size() != 0)) {
    if (!rows)
      return runs ? std::string("stats.rank_runs is missing")
                  : "stats.ranks is missing, expected " + std::to_string(mesh_.ranks()) +
                        " entries (world size)";
    if (runs && rows->size() == 0)
      return "stats.rank_runs is empty, expected runs covering " + std::to_string(mesh_.ranks()) +
             " ranks (world size)";
    if (runs && static_cast<int64_t>(rows->size()) > mesh_.ranks())
      return "stats.rank_runs has " + std::to_string(rows->size()) + " runs, more than the " +
             std::to_string(mesh_.ranks()) + " ranks (world size)";
    if (!runs && static_cast<int64_t>(rows->size()) != mesh_.ranks())
      return "stats.ranks has " + std::to_string(rows->size()) +
             " entries, expected " + std::to_string(mesh_.ranks()) + " (world size)";
    for (uint32_t i = 0; i < rows->size(); ++i) {
      const plan::RankFigures *r = rows->Get(i);
      auto rowName = [&] { return std::string(field) + "[" + std::to_string(i) + "]"; };
      const Who who(rowName);
      if (!runs && r->rank() != static_cast<int32_t>(i))
        return who + " is for rank " + std::to_string(r->rank());
      if (runs && i == 0 && r->rank() != 0)
        return who + " starts at rank " + std::to_string(r->rank()) + ", expected 0";
      if (runs && i > 0 && r->rank() <= rows->Get(i - 1)->rank())
        return who + " starts at rank " + std::to_string(r->rank()) +
               ", not after the previous run's " + std::to_string(rows->Get(i - 1)->rank());
      if (runs && r->rank() >= mesh_.ranks())
        return who + " starts at rank " + std::to_string(r->rank()) + ", past the world size " +
               std::to_string(mesh_.ranks());
      if (runs && i > 0 && common::sameRankFigures(*r, *rows->Get(i - 1)))
        return who + " has the figures of the run before it (adjacent runs must differ)";
      if (!std::isfinite(r->ns_flops()) || r->ns_flops() < 0)
        return who + ".ns_flops is " + std::to_string(r->ns_flops()) +
               " (must be finite and >= 0)";
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
          {"scatter_recv_bytes", r->scatter_recv_bytes()},
          {"data_allreduce_bytes", r->data_allreduce_bytes()},
          {"allgather_send_bytes", r->allgather_send_bytes()},
          {"allgather_recv_bytes", r->allgather_recv_bytes()},
          {"reduce_scatter_send_bytes", r->reduce_scatter_send_bytes()},
          {"reduce_scatter_recv_bytes", r->reduce_scatter_recv_bytes()},
          {"value_bytes", r->value_bytes()},
          {"adam_moment_bytes", r->adam_moment_bytes()},
          {"grad_bytes", r->grad_bytes()},
          {"memory_bytes", r->memory_bytes()}};
      for (const auto &[name, value] : figures) {
        if (value < 0)
          return who + "." + name + " is negative (" + std::to_string(value) + ")";
        if (value > common::kMaxPlanByteCount)
          return who + "." + name + " is " + std::to_string(value) + ", more than 2^62";
      }
    }
  }
  return {};
}

} // namespace dmuon::planfile::detail
