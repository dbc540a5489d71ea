// hooks (docs/dmuonc.md#hooks): which module's forward/backward hooks move each
// param the runtime moves (the owner and sharded routes). Independent of
// where the partition puts units (only its layer numbering is reused): one
// hook group may hold params of many owners. A root-level param (embedding,
// final norm, head) is its own module's group, so its collectives fire
// where it is used.
#include "Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Regex.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace dmuon {

namespace {

// The lowest ancestor module of `name` whose path matches `re` entirely: a
// prefix of `name`.
std::optional<llvm::StringRef> matchingAncestor(llvm::StringRef name, llvm::Regex &re) {
  llvm::StringRef path = name;
  size_t dot;
  while ((dot = path.rfind('.')) != llvm::StringRef::npos) {
    path = path.substr(0, dot);
    if (re.match(path))
      return path;
  }
  return std::nullopt;
}

// The default rule's boundary: the param's layer (the partition's, for an
// owner-route param), else the module path defaultLayerViewOf gives. Either
// views the param's own strings.
llvm::StringRef defaultBoundary(const Param &p) {
  if (!p.layer.empty())
    return p.layer;
  return defaultLayerViewOf(p);
}

// Each hook group's pipeline stage, the one of all its params: a group's
// hooks fire in one stage's forward and backward, so a boundary that
// spans stages is an error. Fills the stages' hook group runs.
bool assignHookGroupStages(PlanModel &model, Diagnostics &diags) {
  bool ok = true;
  for (size_t g = 0; g < model.hookGroups.size(); ++g) {
    HookGroup &h = model.hookGroups[g];
    if (h.params.empty())
      continue;
    const Param &first = model.params[h.params.front()];
    h.pipelineStage = first.pipelineStage;
    for (int i : h.params) {
      const Param &p = model.params[i];
      if (p.pipelineStage == first.pipelineStage)
        continue;
      const std::string msg = "hook group '" + h.name + "' spans pipeline stages " +
                              std::to_string(first.pipelineStage) + " (param '" + first.name +
                              "') and " + std::to_string(p.pipelineStage) + " (param '" + p.name +
                              "'); a hook group cannot cross a stage boundary";
      p.loc.isValid() ? diags.error(p.loc, msg) : diags.error(msg);
      ok = false;
      break;
    }
    if (model.stats.pipelineStages.empty())
      continue;
    PipelineStageStats &row = model.stats.pipelineStages[static_cast<size_t>(h.pipelineStage)];
    if (row.firstHookGroup < 0)
      row.firstHookGroup = static_cast<int>(g);
    ++row.hookGroups;
  }
  return ok;
}

bool formHookGroups(PlanModel &model, Diagnostics &diags);

} // namespace

bool runHooks(PlanModel &model, Diagnostics &diags) {
  return formHookGroups(model, diags) && assignHookGroupStages(model, diags);
}

namespace {

bool formHookGroups(PlanModel &model, Diagnostics &diags) {
  const std::string &pattern = model.options.hookBoundary;
  std::optional<llvm::Regex> re;
  if (!pattern.empty()) {
    re.emplace("^(" + pattern + ")$");
    std::string err;
    if (!re->isValid(err)) {
      diags.error("invalid --hook-boundary regex '" + pattern + "': " + err);
      return false;
    }
  }

  auto moves = [](const Param &p) {
    return p.route == Route::owner || p.route == Route::sharded;
  };
  auto addToGroup = [&](size_t i, int group) {
    model.params[i].hookGroup = group;
    model.hookGroups[static_cast<size_t>(group)].params.push_back(static_cast<int>(i));
  };
  auto newGroup = [&](llvm::StringRef boundary) {
    HookGroup g;
    g.name = boundary.empty() ? "<root>" : boundary.str();
    model.hookGroups.push_back(std::move(g));
    return static_cast<int>(model.hookGroups.size() - 1);
  };

  // The default rule groups by layer, and the partition numbered the moved
  // params' layers (Param::layerId): one flat array from id to group, no
  // table of names (at 1M params, a million string lookups would be the
  // pass's whole cost).
  int layers = 0;
  bool numbered = true;
  for (const Param &p : model.params)
    if (moves(p)) {
      numbered = numbered && p.layerId >= 0;
      layers = std::max(layers, p.layerId + 1);
    }
  if (!re && numbered) {
    std::vector<int> groupOfLayer(static_cast<size_t>(layers), -1);
    for (size_t i = 0; i < model.params.size(); ++i) {
      const Param &p = model.params[i];
      if (!moves(p))
        continue;
      int &group = groupOfLayer[static_cast<size_t>(p.layerId)];
      if (group < 0)
        group = newGroup(defaultBoundary(p));
      addToGroup(i, group);
    }
    return true;
  }

  constexpr unsigned kMaxReported = 20;
  unsigned unmatched = 0;
  // Boundaries are prefixes of a param's name or its layer, so the index
  // keys view the params' own strings: one flat table, no node or string per
  // param. Consecutive params usually share a boundary (a layer's params are
  // adjacent), so the previous one is tried first.
  llvm::DenseMap<llvm::StringRef, int> groupOf;
  llvm::StringRef previous;
  int previousGroup = -1;
  for (size_t i = 0; i < model.params.size(); ++i) {
    const Param &p = model.params[i];
    if (!moves(p))
      continue;
    llvm::StringRef boundary;
    std::optional<llvm::StringRef> a;
    if (re)
      a = matchingAncestor(p.name, *re);
    if (re && (a || p.role == Role::muon)) {
      // A non-Muon param outside every matching module (an embedding under
      // a per-block predicate) falls back to the default rule.
      if (!a) {
        if (++unmatched <= kMaxReported)
          diags.error(p.loc, "Muon param '" + p.name +
                                 "' has no ancestor module matching --hook-boundary='" +
                                 pattern + "'");
        continue;
      }
      boundary = *a;
    } else {
      boundary = defaultBoundary(p);
    }
    int group = previousGroup;
    if (group < 0 || boundary != previous) {
      auto [it, inserted] =
          groupOf.try_emplace(boundary, static_cast<int>(model.hookGroups.size()));
      if (inserted)
        newGroup(boundary);
      group = it->second;
      previous = boundary;
      previousGroup = group;
    }
    addToGroup(i, group);
  }
  if (unmatched > kMaxReported)
    diags.error("... and " + std::to_string(unmatched - kMaxReported) +
                " more Muon params match no --hook-boundary module");
  return !diags.hasErrors();
}

} // namespace

} // namespace dmuon
