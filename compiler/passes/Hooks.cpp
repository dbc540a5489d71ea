// hooks (docs/dmuonc.md#hooks): which module's forward/backward hooks move each
// param the runtime moves (the owner and sharded routes). Independent of the
// partition: one hook group may hold params of many owners. A root-level
// param (embedding, final norm, head) is its own module's group, so its
// collectives fire where it is used.
#include "Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Regex.h"

#include <optional>

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
  // Boundaries are prefixes of a param's name or its layer, so they view
  // the params' own strings: no string per param. First each moved param's
  // boundary, counting the runs of consecutive params that share one (a
  // layer's params are adjacent); the runs bound the groups, so the index
  // and the groups are sized once instead of growing (rehashing a million
  // boundaries was a quarter of this pass at 1M params).
  std::vector<llvm::StringRef> boundaryOf(model.params.size());
  std::vector<bool> moved(model.params.size(), false);
  size_t runs = 0;
  llvm::StringRef previous;
  for (size_t i = 0; i < model.params.size(); ++i) {
    const Param &p = model.params[i];
    if (p.route != Route::owner && p.route != Route::sharded)
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
    } else if (!p.layer.empty()) {
      boundary = p.layer;
    } else {
      // defaultLayerOf gives a module path of the name: its prefix.
      boundary = llvm::StringRef(p.name).take_front(defaultLayerOf(p.name).size());
    }
    boundaryOf[i] = boundary;
    moved[i] = true;
    if (runs == 0 || boundary != previous)
      ++runs;
    previous = boundary;
  }

  llvm::DenseMap<llvm::StringRef, int> groupOf;
  groupOf.reserve(static_cast<unsigned>(runs));
  model.hookGroups.reserve(runs);
  int previousGroup = -1;
  for (size_t i = 0; i < model.params.size(); ++i) {
    if (!moved[i])
      continue;
    const llvm::StringRef boundary = boundaryOf[i];
    int group = previousGroup;
    if (group < 0 || boundary != previous) {
      auto [it, inserted] =
          groupOf.try_emplace(boundary, static_cast<int>(model.hookGroups.size()));
      if (inserted) {
        HookGroup g;
        g.name = boundary.empty() ? "<root>" : boundary.str();
        model.hookGroups.push_back(std::move(g));
      }
      group = it->second;
      previous = boundary;
      previousGroup = group;
    }
    model.params[i].hookGroup = group;
    model.hookGroups[group].params.push_back(static_cast<int>(i));
  }
  if (unmatched > kMaxReported)
    diags.error("... and " + std::to_string(unmatched - kMaxReported) +
                " more Muon params match no --hook-boundary module");
  return !diags.hasErrors();
}

} // namespace dmuon
