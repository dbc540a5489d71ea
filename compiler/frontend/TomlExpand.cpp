// The TOML manifest's expansion: every copy of every template into
// PlanModel::params in file order, one name substitution and one hash insert
// per param.
#include "TomlManifest.h"

#include "common/ParamNames.h"
#include "common/Routes.h"
#include "support/TomlNodes.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <toml++/toml.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

namespace dmuon::toml_manifest {

// --- expansion ------------------------------------------------------------------

std::string TomlFrontend::substitute(const std::vector<Piece> &pieces) const {
  std::string s;
  for (const Piece &piece : pieces) {
    if (piece.level < 0) {
      s += piece.text;
    } else {
      char buf[24];
      auto r = std::to_chars(buf, buf + sizeof buf, index_[piece.level]);
      s.append(buf, r.ptr);
    }
  }
  return s;
}

int64_t TomlFrontend::countParams(const std::vector<Item> &items) {
  int64_t total = 0;
  for (const Item &it : items) {
    int64_t n = it.leaf >= 0 ? 1 : countParams(it.children);
    if (n > kMaxParams)
      return n;
    if (it.leaf < 0) {
      if (n > 0 && it.repeat > (kMaxParams + 1) / n) {
        if (!overflowLoc_.isValid())
          overflowLoc_ = it.repeatLoc;
        return kMaxParams + 1;
      }
      n *= it.repeat;
    }
    total += n;
    if (total > kMaxParams) {
      if (!overflowLoc_.isValid())
        overflowLoc_ = it.leaf < 0 ? it.repeatLoc : leaves_[it.leaf].loc;
      return kMaxParams + 1;
    }
  }
  return total;
}

void TomlFrontend::expand(const std::vector<Item> &items) {
  for (const Item &it : items) {
    if (it.leaf < 0) {
      index_.push_back(0);
      for (int64_t k = 0; k < it.repeat; ++k) {
        index_.back() = it.start + k;
        expand(it.children);
      }
      index_.pop_back();
      continue;
    }
    LeafTemplate &leaf = leaves_[it.leaf];
    Param p;
    p.name = substitute(leaf.pieces);
    if (p.name.empty()) {
      if (!leaf.duplicateReported)
        error(leaf.loc, "param '" + leaf.display + "' expands to an empty name");
      leaf.duplicateReported = true;
      failed_ = true;
      continue;
    }
    if (std::string why = common::paramNameProblem(p.name); !why.empty()) {
      if (!leaf.duplicateReported)
        error(leaf.loc, "param name '" + common::printableName(p.name) + "' " + why + "; " +
                            common::paramNameRuleText());
      leaf.duplicateReported = true;
      failed_ = true;
      continue;
    }
    // Outside every repeat block a template has one copy: its vectors and
    // strings move to the param instead of being copied (only its name,
    // location and display are read again, for diagnostics).
    if (index_.empty()) {
      p.shape = std::move(leaf.shape);
      p.placements = std::move(leaf.placements);
      p.sourceLoc = std::move(leaf.sourceLoc);
    } else {
      p.shape = leaf.shape;
      p.placements = leaf.placements;
      p.sourceLoc = leaf.sourceLoc;
    }
    p.dtype = leaf.dtype;
    p.conv = leaf.conv;
    p.optimizerOverride = leaf.optimizer;
    p.routeOverride = leaf.route;
    p.routeOverrideInherited = leaf.routeInherited;
    p.manifestStage = leaf.stage;
    p.stageLoc = leaf.stageLoc;
    p.blocks = leaf.blocks;
    p.loc = leaf.loc;
    model_.params.push_back(std::move(p));
    const std::string &name = model_.params.back().name;
    uint32_t idx = static_cast<uint32_t>(model_.params.size() - 1);
    if (leaf.qkClip) {
      QkClipPair pair = leaf.qkClip->pair;
      pair.query = static_cast<int>(idx);
      pair.keyName = substitute(leaf.qkClip->keyPieces);
      model_.qkClip.push_back(std::move(pair));
    }
    auto [pos, inserted] = seen_.try_emplace(llvm::StringRef(name), idx);
    leafOfParam_.push_back(it.leaf);
    if (inserted)
      continue;
    int firstLeaf = leafOfParam_[pos->second];
    if (!leaf.duplicateReported) {
      std::string msg = "duplicate param name '" + name + "'";
      if (firstLeaf == it.leaf)
        msg += "; every copy of the repeat block gets this name, use a placeholder "
               "such as '{i}' in the name or the block's prefix";
      error(leaf.loc, msg);
      if (firstLeaf != it.leaf)
        diags_.note(model_.params[pos->second].loc, "'" + name + "' is first defined here");
      leaf.duplicateReported = true;
    }
    failed_ = true;
  }
}

} // namespace dmuon::toml_manifest
