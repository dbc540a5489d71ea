// Every string a plan stores is text (common::textProblem): valid UTF-8
// without control characters; the names of params and buffers, and a
// renamed param's source name, follow the param names' rule
// (common::paramNameProblem). A plan from elsewhere cannot forge lines of
// the text form, send escape codes to a terminal or break the JSON form
// through them. Runs first, so no later message quotes a string unchecked.
#include "common/ParamNames.h"
#include "plan/verify/PlanChecker.h"

namespace dmuon::planfile::detail {

namespace {

// `who`'s `field` when it is set and has a problem: "param #3: source_name
// '...' contains a control character (0x0a) at byte 3".
std::string stringError(const flatbuffers::String *s, const std::string &who, const char *field,
                        bool name = false) {
  if (!s)
    return {};
  const std::string_view text = s->string_view();
  std::string why = name ? common::paramNameProblem(text) : common::textProblem(text);
  if (why.empty())
    return {};
  return who + ": " + field + " '" + common::printableName(text) + "' " + why +
         (name ? " (" + common::paramNameRuleText() + ")" : std::string(" (plan strings are "
                                                                        "UTF-8 without control "
                                                                        "characters)"));
}

} // namespace

std::string Checker::checkStrings() {
  std::string e;
  auto check = [&](const flatbuffers::String *s, auto &&who, const char *field, bool name) {
    if (e.empty() && s)
      e = stringError(s, who(), field, name);
    return e.empty();
  };
  auto plan = [] { return std::string("plan"); };
  check(p_.producer(), plan, "producer", false);
  check(p_.source(), plan, "source", false);
  check(p_.model_name(), plan, "model_name", false);
  if (const plan::Options *o = p_.options()) {
    auto options = [] { return std::string("options"); };
    check(o->hook_boundary(), options, "hook_boundary", false);
    check(o->muon_include(), options, "muon_include", false);
    check(o->muon_exclude(), options, "muon_exclude", false);
    check(o->cost_table(), options, "cost_table", false);
  }
  if (const plan::Mesh *m = p_.mesh(); m && m->dims())
    for (uint32_t i = 0; i < m->dims()->size() && e.empty(); ++i)
      check(m->dims()->Get(i)->name(), [&] { return "mesh dim " + std::to_string(i); }, "name",
            false);
  for (uint32_t i = 0; i < size(p_.params()) && e.empty(); ++i) {
    const plan::Param *q = p_.params()->Get(i);
    auto who = [&] { return "param #" + std::to_string(i); };
    // (The name itself: checkParams, with the duplicate check.)
    check(q->source_name(), who, "source_name", true);
    check(q->name_note(), who, "name_note", false);
    check(q->source_loc(), who, "source_loc", false);
    check(q->layer(), who, "layer", false);
    if (q->placements())
      for (uint32_t j = 0; j < q->placements()->size() && e.empty(); ++j)
        check(q->placements()->Get(j)->reduce_op(), who, "reduce_op", false);
  }
  for (uint32_t i = 0; i < size(p_.units()) && e.empty(); ++i) {
    const plan::Unit *u = p_.units()->Get(i);
    auto who = [&] { return "unit " + std::to_string(i); };
    check(u->name(), who, "name", false);
    check(u->layer(), who, "layer", false);
  }
  for (uint32_t i = 0; i < size(p_.comm_groups()) && e.empty(); ++i)
    check(p_.comm_groups()->Get(i)->key(), [&] { return "comm group " + std::to_string(i); },
          "key", false);
  for (uint32_t i = 0; i < size(p_.hook_groups()) && e.empty(); ++i)
    check(p_.hook_groups()->Get(i)->name(), [&] { return "hook group " + std::to_string(i); },
          "name", false);
  if (p_.stats())
    check(p_.stats()->lower_bound_kind(), [] { return std::string("stats"); },
          "lower_bound_kind", false);
  for (uint32_t i = 0; i < size(p_.buffers()) && e.empty(); ++i) {
    const plan::Buffer *b = p_.buffers()->Get(i);
    auto who = [&] { return "buffer " + std::to_string(i); };
    if (b->name() && b->name()->size() != 0) // (no name: checkBuffers)
      check(b->name(), who, "name", true);
    check(b->reason(), who, "reason", false);
  }
  return e;
}

} // namespace dmuon::planfile::detail
