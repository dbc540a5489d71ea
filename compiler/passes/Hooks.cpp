// hooks (docs/dmuonc.md#hooks): which module's forward/backward hooks move each
// param the runtime moves (the owner and sharded routes). Independent of the
// partition: one hook group may hold params of many owners. A root-level
// param (embedding, final norm, head) is its own module's group, so its
// collectives fire where it is used.
#include "Passes.h"

#include "llvm/Support/Regex.h"

#include <unordered_map>

namespace dmuon {

namespace {

// The lowest ancestor module of `name` whose path matches `re` entirely.
std::optional<std::string> matchingAncestor(const std::string &name, llvm::Regex &re) {
  std::string_view path(name);
  size_t dot;
  while ((dot = path.rfind('.')) != std::string_view::npos) {
    path = path.substr(0, dot);
    if (re.match(llvm::StringRef(path.data(), path.size())))
      return std::string(path);
  }
  return std::nullopt;
}

} // namespace

bool runHooks(PlanModel &model, Diagnostics &diags) {
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

  constexpr unsigned kMaxReported = 20;
  unsigned unmatched = 0;
  std::unordered_map<std::string, int> groupOf;
  for (size_t i = 0; i < model.params.size(); ++i) {
    Param &p = model.params[i];
    if (p.route != Route::owner && p.route != Route::sharded)
      continue;
    std::string boundary;
    std::optional<std::string> a;
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
      boundary = p.layer.empty() ? defaultLayerOf(p.name) : p.layer;
    }
    auto [it, inserted] =
        groupOf.try_emplace(boundary, static_cast<int>(model.hookGroups.size()));
    if (inserted) {
      HookGroup g;
      g.name = boundary.empty() ? "<root>" : boundary;
      model.hookGroups.push_back(std::move(g));
    }
    p.hookGroup = it->second;
    model.hookGroups[it->second].params.push_back(static_cast<int>(i));
  }
  if (unmatched > kMaxReported)
    diags.error("... and " + std::to_string(unmatched - kMaxReported) +
                " more Muon params match no --hook-boundary module");
  return !diags.hasErrors();
}

} // namespace dmuon
