// The verifier's checks of pipeline stages (format 1.9; PlanChecker.h): each
// hook group on one stage, the stages' groups in order, and one stats row
// per stage that counts what the params and groups say. Params' stages are
// range-checked with the params, owner ranks on their stage with the owners.
#include "plan/verify/PlanChecker.h"

#include <vector>

namespace dmuon::planfile::detail {

std::string Checker::checkPipelineStages() {
  const int64_t P = mesh_.P;
  std::vector<int> params(static_cast<size_t>(P), 0), firstGroup(static_cast<size_t>(P), -1),
      groups(static_cast<size_t>(P), 0);
  for (int64_t i = 0; i < numParams_; ++i)
    ++params[static_cast<size_t>(p_.params()->Get(static_cast<uint32_t>(i))->pipeline_stage())];
  int previous = 0;
  for (uint32_t g = 0; g < size(p_.hook_groups()); ++g) {
    const plan::HookGroup *h = p_.hook_groups()->Get(g);
    auto groupName = [&] {
      return "hook group " + std::to_string(g) + " '" + str(h->name()) + "'";
    };
    const Who who(groupName);
    const int stage = h->pipeline_stage();
    if (stage < 0 || stage >= P)
      return who + ": pipeline_stage " + std::to_string(stage) + " out of range (mesh has " +
             std::to_string(P) + " pipeline stage" + (P == 1 ? ")" : "s)");
    if (stage < previous)
      return who + " is on pipeline stage " + std::to_string(stage) + " after a group of stage " +
             std::to_string(previous) + " (a stage's hook groups are one contiguous run)";
    previous = stage;
    if (firstGroup[static_cast<size_t>(stage)] < 0)
      firstGroup[static_cast<size_t>(stage)] = static_cast<int>(g);
    ++groups[static_cast<size_t>(stage)];
    for (uint32_t k = 0; h->params() && k < h->params()->size(); ++k) {
      const int index = h->params()->Get(k);
      if (index < 0 || index >= numParams_)
        continue; // checkHooks refuses it, naming the group
      const plan::Param *q = p_.params()->Get(static_cast<uint32_t>(index));
      if (q->pipeline_stage() != stage)
        return who + " is on pipeline stage " + std::to_string(stage) + " but its param '" +
               str(q->name()) + "' is on stage " + std::to_string(q->pipeline_stage()) +
               " (a hook group cannot cross a stage boundary)";
    }
  }
  const plan::Stats *s = p_.stats();
  const auto *rows = s ? s->pipeline_stages() : nullptr;
  const uint32_t n = rows ? rows->size() : 0;
  if (P == 1 || !reached(plan::Stage::partition)) {
    if (n != 0)
      return "stats.pipeline_stages has " + std::to_string(n) + " rows in a plan " +
             (P == 1 ? "without a stage dim" : "captured before the partition");
    return {};
  }
  if (n != P)
    return "stats.pipeline_stages has " + std::to_string(n) + " rows, expected " +
           std::to_string(P) + " (one per pipeline stage)";
  for (uint32_t k = 0; k < n; ++k) {
    const plan::PipelineStageStats *r = rows->Get(k);
    const std::string who = "stats.pipeline_stages row " + std::to_string(k);
    if (r->stage() != static_cast<int>(k))
      return who + " is for stage " + std::to_string(r->stage()) + " (rows are in stage order)";
    if (r->params() != params[k])
      return who + " counts " + std::to_string(r->params()) + " params, but " +
             std::to_string(params[k]) + " params are on stage " + std::to_string(k);
    if (reached(plan::Stage::hooks) &&
        (r->first_hook_group() != firstGroup[k] || r->hook_groups() != groups[k]))
      return who + " says hook groups [" + std::to_string(r->first_hook_group()) + ", +" +
             std::to_string(r->hook_groups()) + "), but stage " + std::to_string(k) +
             "'s groups are [" + std::to_string(firstGroup[k]) + ", +" + std::to_string(groups[k]) +
             ")";
    if (!(r->lower_bound() >= 0) || !(r->max_load() >= 0) || !(r->total_cost() >= 0))
      return who + " has a negative or non-finite load";
  }
  return {};
}

} // namespace dmuon::planfile::detail
