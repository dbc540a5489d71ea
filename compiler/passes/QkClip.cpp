// QK-Clip pairs (docs/manifest-format.md, `qk_clip`), checked as part of
// validate: the key names a param, both are 2-D Muon matrices whose output
// rows are heads x head_dim, neither has its rows split by a model-parallel
// mesh dim, and no param is in two pairs. Copies of one repeat-block template
// share a location; each problem is reported once per template.
#include "Passes.h"

#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace dmuon {

namespace {

class QkClipChecker {
public:
  QkClipChecker(PlanModel &model, Diagnostics &diags) : m_(model), diags_(diags) {}

  void run() {
    // Most models have no pairs: no name index for them (a node per param).
    if (m_.qkClip.empty())
      return;
    std::unordered_map<std::string_view, int> byName;
    byName.reserve(m_.params.size());
    for (size_t i = 0; i < m_.params.size(); ++i)
      byName.emplace(m_.params[i].name, static_cast<int>(i));
    std::unordered_map<int, size_t> pairOf; // param -> the first pair it is in
    for (size_t pi = 0; pi < m_.qkClip.size(); ++pi) {
      QkClipPair &pair = m_.qkClip[pi];
      const std::string who = "qk_clip of param '" + m_.params[pair.query].name + "'";
      auto it = byName.find(pair.keyName);
      if (it == byName.end()) {
        report(pair.keyLoc, 0,
               who + " names key '" + pair.keyName + "', which is not a param of the model");
        continue;
      }
      pair.key = it->second;
      if (pair.key == pair.query) {
        report(pair.keyLoc, 1, who + " names the param itself as its key");
        continue;
      }
      bool ok = checkSide(pair, who, "query", pair.query, pair.heads);
      ok &= checkSide(pair, who, "key", pair.key, pair.keyHeads);
      for (int side : {pair.query, pair.key}) {
        auto [first, inserted] = pairOf.try_emplace(side, pi);
        if (inserted || !ok)
          continue;
        const QkClipPair &earlier = m_.qkClip[first->second];
        if (report(pair.loc, 2,
                   "param '" + m_.params[side].name + "' is in the qk_clip pairs of both '" +
                       m_.params[earlier.query].name + "' and '" + m_.params[pair.query].name +
                       "'; a param can be in at most one pair"))
          diags_.note(earlier.loc, "its first pair is declared here");
      }
    }
  }

private:
  // One side of a pair: a 2-D Muon matrix of `heads` x head_dim rows, its
  // rows whole on every rank.
  bool checkSide(const QkClipPair &pair, const std::string &who, const char *side, int index,
                 int64_t heads) {
    const Param &p = m_.params[index];
    const std::string what = who + ": " + side + " '" + p.name + "'";
    if (p.role != Role::muon) {
      report(pair.loc, 3,
             what + " is an AdamW param (" + plan::EnumNameRoleReason(p.roleReason) +
                 "); QK-Clip rescales Muon params on their owner, so both params of a pair "
                 "must use Muon");
      return false;
    }
    if (p.shape.size() != 2 || p.conv) {
      report(pair.loc, 4,
             what + " has shape " + shapeString(p.shape) +
                 "; QK-Clip needs a 2-D [heads*head_dim, in] projection weight");
      return false;
    }
    if (p.shape[0] != heads * pair.headDim) {
      report(pair.loc, 5,
             what + " has " + std::to_string(p.shape[0]) + " rows, but " +
                 (index == pair.query ? "heads" : "key_heads") + " * head_dim = " +
                 std::to_string(heads) + " * " + std::to_string(pair.headDim) + " = " +
                 std::to_string(heads * pair.headDim));
      return false;
    }
    const Mesh &mesh = m_.mesh;
    for (size_t d = 0; d < p.placements.size() && d < mesh.dims.size(); ++d) {
      const Placement &pl = p.placements[d];
      const int tensorDim = pl.dim < 0 ? pl.dim + 2 : pl.dim;
      if (!pl.isShard() || tensorDim != 0 || mesh.isOwnershipDim(static_cast<int>(d)))
        continue;
      report(pair.loc, 6,
             what + " has its rows split by " + pl.str() + " on mesh dim '" +
                 mesh.dims[d].name +
                 "'; QK-Clip rescales whole heads' rows on each rank, so it is not supported "
                 "on a row-sharded projection: shard its columns (Shard(1)) or replicate it");
      return false;
    }
    return true;
  }

  // Reports once per template location and kind of problem; returns whether
  // it reported now.
  bool report(llvm::SMLoc loc, int kind, const std::string &msg) {
    if (!reported_.emplace(loc.getPointer(), kind).second)
      return false;
    diags_.error(loc, msg);
    return true;
  }

  PlanModel &m_;
  Diagnostics &diags_;
  std::set<std::pair<const char *, int>> reported_;
};

} // namespace

bool validateQkClip(PlanModel &model, Diagnostics &diags) {
  const unsigned before = diags.errorCount();
  QkClipChecker(model, diags).run();
  return diags.errorCount() == before;
}

} // namespace dmuon
