// The TOML manifest frontend's parts (docs/manifest-format.md), shared by
// its three files: TomlFrontend.cpp (locations, values, the run),
// TomlEntries.cpp (param tables and repeat blocks, checked once per
// template) and TomlExpand.cpp (expansion into PlanModel::params).
#ifndef DMUON_COMPILER_FRONTEND_TOMLMANIFEST_H
#define DMUON_COMPILER_FRONTEND_TOMLMANIFEST_H

#include "Frontend.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SMLoc.h"

#include <toml++/toml.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dmuon::toml_manifest {

inline constexpr int64_t kMaxParams = kMaxModelParams;
inline constexpr int kMaxBlockDepth = 8;

// One piece of a name template: literal text, or the value of the placeholder
// of the enclosing block at `level` (0 = outermost).
struct Piece {
  std::string text;
  int level = -1;
};

// Appends `own` to `out`, merging adjacent literal text.
inline void appendPieces(std::vector<Piece> &out, std::vector<Piece> &&own) {
  for (Piece &p : own) {
    if (p.level < 0 && !out.empty() && out.back().level < 0)
      out.back().text += p.text;
    else
      out.push_back(std::move(p));
  }
}

struct Defaults {
  std::optional<DType> dtype;
  std::optional<std::vector<Placement>> placements;
  std::optional<OptimizerChoice> optimizer;
  std::optional<Route> route;
  // `stage = k`: the pipeline stage (passes/PipelineStages.cpp), and where.
  std::optional<int> stage;
  llvm::SMLoc stageLoc;
};

// A param's `qk_clip = { key = ..., heads = ..., head_dim = ... }`: the key's
// name is a template like the param's own (enclosing prefixes prepended).
struct QkClipTemplate {
  std::vector<Piece> keyPieces;
  QkClipPair pair; // every copy's, but for the query and the key's name
};

struct LeafTemplate {
  std::vector<Piece> pieces; // prefixes of enclosing blocks, then the name
  std::string display;       // the same, as written (placeholders kept)
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  std::vector<Placement> placements;
  bool conv = false;
  std::optional<OptimizerChoice> optimizer;
  std::optional<Route> route;
  bool routeInherited = false; // from an enclosing block: skips Muon params
  int stage = -1;              // `stage`, own or an enclosing block's; -1: none
  llvm::SMLoc stageLoc;
  std::shared_ptr<const MatrixBlocks> blocks; // heads / ns_split; shared by every copy
  // Rare, and large beside the rest: a pointer keeps a million templates
  // (one per param of a flat manifest) a third smaller.
  std::unique_ptr<QkClipTemplate> qkClip;
  llvm::SMLoc loc;
  std::string sourceLoc;
  bool duplicateReported = false;
};

struct Item {
  int leaf = -1; // index into leaves, or -1 for a block
  int64_t repeat = 1, start = 0;
  llvm::SMLoc repeatLoc;
  std::vector<Item> children;
};

// Where a placeholder comes from.
struct Scope {
  std::string name;
};

class TomlFrontend {
public:
  TomlFrontend(const std::string &path, PlanModel &model, Diagnostics &diags)
      : path_(path), model_(model), diags_(diags) {}

  // Reads the file named by the path, or takes `text` when given.
  bool run(const std::string_view *text = nullptr);

private:
  // --- locations -----------------------------------------------------------
  void buildLineTable();
  llvm::SMLoc locOf(const toml::source_position &pos) const;
  llvm::SMLoc locOf(const toml::node &n) const { return locOf(n.source().begin); }
  llvm::SMLoc locOf(const toml::key &k) const { return locOf(k.source().begin); }
  // The location of character `offset` of a string value, when the value is
  // written on one line without escapes; the value's start otherwise.
  llvm::SMLoc locInString(const toml::node &n, size_t offset) const;

  void error(llvm::SMLoc loc, const llvm::Twine &msg) { diags_.error(loc, msg); }

  // --- checking ------------------------------------------------------------
  void parseModelTable(const toml::node &node);
  bool parseParamArray(const toml::node &node, const std::string &where,
                       std::vector<Item> &out, int depth);
  bool parseEntry(const toml::table &t, std::vector<Item> &out, int depth);
  bool parseBlock(const toml::table &t, Item &item, int depth);
  bool parseLeaf(const toml::table &t, Item &item);
  bool parseTemplateString(const toml::node &value, const std::string &text,
                           const char *what, std::vector<Piece> &out);
  // A name inside the enclosing blocks: their prefixes, then `text`.
  bool parseScopedName(const toml::node &value, const std::string &text, const char *what,
                       std::vector<Piece> &out);
  bool parseDTypeValue(const toml::node &value, const std::string &who, DType &out);
  bool parseOptimizerValue(const toml::node &value, const std::string &who, OptimizerChoice &out);
  bool parseRouteValue(const toml::node &value, const std::string &who, Route &out);
  bool parsePlacements(const toml::node &value, const std::string &who,
                       std::vector<Placement> &out);
  bool parseOnePlacement(const toml::node &value, const std::string &who, int meshDim,
                         Placement &out);
  bool parseDefaults(const toml::table &t, const std::string &who, Defaults &d);
  // `own`'s stage over an enclosing block's: the same or an error (a param
  // on two stages).
  bool mergeStage(const Defaults &own, const Defaults *inherited, const std::string &who,
                  Defaults &into);
  bool parseQkClip(const toml::node &value, const std::string &who, QkClipTemplate &out);
  bool parseBlocks(const toml::table &t, const std::string &who,
                   std::shared_ptr<const MatrixBlocks> &out);
  std::string substitute(const std::vector<Piece> &pieces) const;
  void unknownKey(const toml::key &k, const std::string &who, bool isBlock);

  std::string displayPrefix() const;
  int64_t countParams(const std::vector<Item> &items);
  void expand(const std::vector<Item> &items);

  const std::string &path_;
  PlanModel &model_;
  Diagnostics &diags_;

  unsigned buffer_ = 0;
  const char *bufStart_ = nullptr;
  size_t bufSize_ = 0;
  std::vector<size_t> lineStarts_;

  std::optional<DType> modelDType_;
  std::vector<Scope> scopes_;           // enclosing repeat blocks, outermost first
  std::vector<std::vector<Piece>> prefixPieces_; // prefixes of enclosing blocks
  std::vector<std::string> prefixText_;
  std::vector<Defaults> defaults_;       // enclosing blocks' defaults
  std::vector<LeafTemplate> leaves_;
  bool failed_ = false;

  // Expansion state.
  std::vector<int64_t> index_;
  // Names seen so far, viewing the params' names (reserved, so they stay
  // put): one flat table, not a node per param.
  llvm::DenseMap<llvm::StringRef, uint32_t> seen_;
  std::vector<int> leafOfParam_;
  llvm::SMLoc overflowLoc_;
};

} // namespace dmuon::toml_manifest

#endif
