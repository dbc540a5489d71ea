// The TOML manifest frontend (docs/manifest-format.md).
//
// The manifest is parsed by toml++ into a tree, checked once per template
// (a [[param]] table, possibly inside repeat blocks), and then expanded copy by
// copy into PlanModel::params in file order. All checks that do not depend on
// the copy index run once per template, so a 61-layer x 384-expert manifest
// costs one name substitution and one hash insert per param.
#include "Frontend.h"
#include "common/ParamNames.h"
#include "common/Routes.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "TomlNodes.h"

#include <toml++/toml.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

namespace dmuon {

namespace {

constexpr int64_t kMaxParams = 10'000'000;
constexpr int kMaxBlockDepth = 8;


// One piece of a name template: literal text, or the value of the placeholder
// of the enclosing block at `level` (0 = outermost).
struct Piece {
  std::string text;
  int level = -1;
};

// Appends `own` to `out`, merging adjacent literal text.
void appendPieces(std::vector<Piece> &out, std::vector<Piece> &&own) {
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
  std::optional<Role> role;
  std::optional<Route> route;
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
  std::optional<Role> role;
  std::optional<Route> route;
  bool routeInherited = false; // from an enclosing block: skips Muon params
  std::optional<QkClipTemplate> qkClip;
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
  bool parseRoleValue(const toml::node &value, const std::string &who, Role &out);
  bool parseRouteValue(const toml::node &value, const std::string &who, Route &out);
  bool parsePlacements(const toml::node &value, const std::string &who,
                       std::vector<Placement> &out);
  bool parseOnePlacement(const toml::node &value, const std::string &who, int meshDim,
                         Placement &out);
  bool parseDefaults(const toml::table &t, const std::string &who, Defaults &d);
  bool parseQkClip(const toml::node &value, const std::string &who, QkClipTemplate &out);
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
  std::unordered_map<std::string_view, uint32_t> seen_;
  std::vector<int> leafOfParam_;
  llvm::SMLoc overflowLoc_;
};

// --- locations ----------------------------------------------------------------

void TomlFrontend::buildLineTable() {
  lineStarts_.clear();
  lineStarts_.push_back(0);
  for (size_t i = 0; i < bufSize_; ++i)
    if (bufStart_[i] == '\n')
      lineStarts_.push_back(i + 1);
}

llvm::SMLoc TomlFrontend::locOf(const toml::source_position &pos) const {
  if (pos.line == 0 || pos.line > lineStarts_.size())
    return llvm::SMLoc();
  size_t begin = lineStarts_[pos.line - 1];
  size_t end = pos.line < lineStarts_.size() ? lineStarts_[pos.line] - 1 : bufSize_;
  // toml++ counts columns in code points; SourceMgr counts bytes.
  size_t off = begin;
  for (unsigned col = 1; col < pos.column && off < end;) {
    ++off;
    while (off < end && (static_cast<unsigned char>(bufStart_[off]) & 0xC0) == 0x80)
      ++off;
    ++col;
  }
  return diags_.locFor(buffer_, pos.line, static_cast<unsigned>(off - begin + 1));
}

llvm::SMLoc TomlFrontend::locInString(const toml::node &n, size_t offset) const {
  llvm::SMLoc start = locOf(n);
  const auto *s = n.as_string();
  if (!start.isValid() || !s)
    return start;
  const char *p = start.getPointer();
  const char *end = bufStart_ + bufSize_;
  if (p >= end || (*p != '"' && *p != '\''))
    return start;
  const std::string &v = s->get();
  if (static_cast<size_t>(end - p) < v.size() + 2 || p[v.size() + 1] != *p ||
      std::memcmp(p + 1, v.data(), v.size()) != 0 || v.find('\n') != std::string::npos)
    return start;
  return llvm::SMLoc::getFromPointer(p + 1 + std::min(offset, v.size()));
}

// --- checking -------------------------------------------------------------------

std::string TomlFrontend::displayPrefix() const {
  std::string s;
  for (const std::string &p : prefixText_)
    s += p;
  return s;
}

void TomlFrontend::unknownKey(const toml::key &k, const std::string &who, bool isBlock) {
  static const char *const leafKeys[] = {"name", "shape", "dtype", "placements",
                                         "optimizer", "route", "conv", "qk_clip"};
  static const char *const blockKeys[] = {"repeat", "start", "index", "prefix",
                                          "param", "dtype", "placements", "optimizer",
                                          "route"};
  llvm::StringRef key(k.str());
  // A key of the other kind of table: say why it does not apply.
  if (!isBlock) {
    for (const char *b : blockKeys)
      if (key == b) {
        error(locOf(k), "key '" + key + "' belongs to repeat blocks, but " + who +
                            " has no 'repeat'; a block has 'repeat' and nested "
                            "[[param.param]] tables instead of 'name'");
        failed_ = true;
        return;
      }
  } else {
    for (const char *l : leafKeys)
      if (key == l) {
        error(locOf(k), "key '" + key + "' is not allowed in " + who +
                            "; put it on the nested params");
        failed_ = true;
        return;
      }
  }
  std::string msg = "unknown key '" + key.str() + "' in " + who;
  if (isBlock)
    msg += didYouMean(key, blockKeys);
  else
    msg += didYouMean(key, leafKeys);
  error(locOf(k), msg);
  failed_ = true;
}

bool TomlFrontend::parseTemplateString(const toml::node &value, const std::string &text,
                                       const char *what, std::vector<Piece> &out) {
  size_t i = 0, lit = 0;
  auto flush = [&](size_t upto) {
    if (upto > lit) {
      if (!out.empty() && out.back().level < 0)
        out.back().text.append(text, lit, upto - lit);
      else
        out.push_back(Piece{text.substr(lit, upto - lit), -1});
    }
  };
  while (i < text.size()) {
    char c = text[i];
    if (c == '}') {
      error(locInString(value, i),
            "unbalanced '}' in " + llvm::Twine(what) + " '" + text + "'");
      return false;
    }
    if (c != '{') {
      ++i;
      continue;
    }
    size_t close = text.find_first_of("{}", i + 1);
    if (close == std::string::npos || text[close] != '}') {
      error(locInString(value, i), "unbalanced '{' in " + llvm::Twine(what) + " '" +
                                       text + "': a placeholder is written '{i}'");
      return false;
    }
    std::string name = text.substr(i + 1, close - i - 1);
    int level = -1;
    for (size_t s = scopes_.size(); s-- > 0;)
      if (scopes_[s].name == name) {
        level = static_cast<int>(s);
        break;
      }
    if (level < 0) {
      std::string msg = "unknown placeholder '{" + name + "}' in " + what + " '" + text + "'";
      if (scopes_.empty()) {
        msg += "; placeholders are only defined inside repeat blocks";
      } else {
        msg += " (placeholders in scope: ";
        for (size_t s = 0; s < scopes_.size(); ++s)
          msg.append(s ? ", " : "").append(scopes_[s].name);
        msg += ")";
      }
      error(locInString(value, i), msg);
      return false;
    }
    flush(i);
    out.push_back(Piece{{}, level});
    i = close + 1;
    lit = i;
  }
  flush(text.size());
  return true;
}

bool TomlFrontend::parseScopedName(const toml::node &value, const std::string &text,
                                   const char *what, std::vector<Piece> &out) {
  for (const std::vector<Piece> &p : prefixPieces_)
    out.insert(out.end(), p.begin(), p.end());
  std::vector<Piece> own;
  if (!parseTemplateString(value, text, what, own))
    return false;
  appendPieces(out, std::move(own));
  return true;
}

bool TomlFrontend::parseDTypeValue(const toml::node &value, const std::string &who,
                                   DType &out) {
  const auto *s = value.as_string();
  if (!s) {
    error(locOf(value), "'dtype' in " + who + " must be a string, not " +
                            tomlTypeName(value));
    return false;
  }
  std::optional<DType> t = parseDType(s->get());
  if (!t) {
    error(locOf(value), "unknown dtype '" + s->get() + "' in " + who +
                            " (expected f32, bf16, f16 or f64; also accepted: "
                            "float32, fp32, float, bfloat16, float16, fp16, half, "
                            "float64, fp64, double)");
    return false;
  }
  out = *t;
  return true;
}

bool TomlFrontend::parseRoleValue(const toml::node &value, const std::string &who,
                                  Role &out) {
  const auto *s = value.as_string();
  if (!s) {
    error(locOf(value), "'optimizer' in " + who + " must be a string, not " +
                            tomlTypeName(value));
    return false;
  }
  if (s->get() == "muon") {
    out = Role::muon;
    return true;
  }
  if (s->get() == "adamw") {
    out = Role::adamw;
    return true;
  }
  error(locOf(value), "unknown optimizer '" + s->get() + "' in " + who +
                          " (expected \"muon\" or \"adamw\")");
  return false;
}

bool TomlFrontend::parseRouteValue(const toml::node &value, const std::string &who,
                                   Route &out) {
  const auto *s = value.as_string();
  if (!s) {
    error(locOf(value), "'route' in " + who + " must be a string, not " + tomlTypeName(value));
    return false;
  }
  if (std::optional<Route> r = common::parseRoute(s->get())) {
    out = *r;
    return true;
  }
  error(locOf(value), "unknown route '" + s->get() + "' in " + who + " (expected " +
                          common::kRouteNames + ")");
  return false;
}

bool TomlFrontend::parseOnePlacement(const toml::node &value, const std::string &who,
                                     int meshDim, Placement &out) {
  const std::string &dimName = model_.mesh.dims[meshDim].name;
  const auto *s = value.as_string();
  if (!s) {
    error(locOf(value), "placement for mesh dim '" + dimName + "' in " + who +
                            " must be a string such as \"Shard(0)\", not " +
                            tomlTypeName(value));
    return false;
  }
  std::string err;
  size_t col = 0;
  if (!parsePlacement(s->get(), out, err, col)) {
    error(locInString(value, col), "invalid placement '" + s->get() + "' for mesh dim '" +
                                       dimName + "' in " + who + ": " + err);
    return false;
  }
  return true;
}

bool TomlFrontend::parsePlacements(const toml::node &value, const std::string &who,
                                   std::vector<Placement> &out) {
  const Mesh &mesh = model_.mesh;
  out.assign(mesh.dims.size(), Placement{});
  std::string dimList;
  for (size_t i = 0; i < mesh.dims.size(); ++i)
    dimList.append(i ? ", " : "").append(mesh.dims[i].name);
  bool ok = true;
  if (const auto *t = value.as_table()) {
    std::vector<bool> given(mesh.dims.size(), false);
    for (auto &&[k, v] : *t) {
      std::string_view name = k.str();
      int dim = mesh.findDim(name);
      if (dim < 0 && name == "dp")
        dim = mesh.findDim("dp_shard");
      if (dim < 0) {
        error(locOf(k), "placement names mesh dim '" + std::string(name) +
                            "' but --mesh has dims " + dimList + " (in " + who + ")");
        ok = false;
        continue;
      }
      if (given[dim]) {
        error(locOf(k), "placement for mesh dim '" + mesh.dims[dim].name +
                            "' is given twice in " + who);
        ok = false;
        continue;
      }
      given[dim] = true;
      ok &= parseOnePlacement(v, who, dim, out[dim]);
    }
    return ok;
  }
  if (const auto *a = value.as_array()) {
    if (a->size() != mesh.dims.size()) {
      error(locOf(value), std::to_string(a->size()) + " placement" +
                              (a->size() == 1 ? "" : "s") + " for a " +
                              std::to_string(mesh.dims.size()) + "-dim mesh (" + dimList +
                              ") in " + who +
                              "; give one per mesh dim, or a table keyed by dim name");
      return false;
    }
    for (size_t i = 0; i < a->size(); ++i)
      ok &= parseOnePlacement((*a)[i], who, static_cast<int>(i), out[i]);
    return ok;
  }
  error(locOf(value), "'placements' in " + who +
                          " must be a table keyed by mesh dim name or an array with one "
                          "string per mesh dim, not " + tomlTypeName(value));
  return false;
}

bool TomlFrontend::parseDefaults(const toml::table &t, const std::string &who, Defaults &d) {
  bool ok = true;
  if (const toml::node *v = t.get("dtype")) {
    DType dt;
    if (parseDTypeValue(*v, who, dt))
      d.dtype = dt;
    else
      ok = false;
  }
  if (const toml::node *v = t.get("placements")) {
    std::vector<Placement> pl;
    if (parsePlacements(*v, who, pl))
      d.placements = std::move(pl);
    else
      ok = false;
  }
  if (const toml::node *v = t.get("optimizer")) {
    Role r;
    if (parseRoleValue(*v, who, r))
      d.role = r;
    else
      ok = false;
  }
  if (const toml::node *v = t.get("route")) {
    Route r;
    if (parseRouteValue(*v, who, r))
      d.route = r;
    else
      ok = false;
  }
  return ok;
}

void TomlFrontend::parseModelTable(const toml::node &node) {
  const toml::table *t = node.as_table();
  if (!t) {
    error(locOf(node), "'model' must be a table ([model]), not " + llvm::Twine(tomlTypeName(node)));
    failed_ = true;
    return;
  }
  for (auto &&[k, v] : *t) {
    if (k.str() == "name") {
      if (const auto *s = v.as_string()) {
        model_.modelName = s->get();
      } else {
        error(locOf(v), "'name' in [model] must be a string, not " + llvm::Twine(tomlTypeName(v)));
        failed_ = true;
      }
    } else if (k.str() == "dtype") {
      DType dt;
      if (parseDTypeValue(v, "[model]", dt))
        modelDType_ = dt;
      else
        failed_ = true;
    } else {
      error(locOf(k), "unknown key '" + llvm::Twine(k.str()) +
                          "' in [model] (expected 'name' or 'dtype')");
      failed_ = true;
    }
  }
}

bool TomlFrontend::parseParamArray(const toml::node &node, const std::string &where,
                                   std::vector<Item> &out, int depth) {
  const toml::array *a = node.as_array();
  if (!a || !a->is_array_of_tables()) {
    error(locOf(node), "'param' " + llvm::Twine(where) +
                           " must be an array of tables (write [[param]]), not " +
                           (a ? "an array of values" : tomlTypeName(node)));
    failed_ = true;
    return false;
  }
  bool ok = true;
  for (const toml::node &e : *a)
    ok &= parseEntry(*e.as_table(), out, depth);
  return ok;
}

bool TomlFrontend::parseEntry(const toml::table &t, std::vector<Item> &out, int depth) {
  Item item;
  bool isBlock = t.contains("repeat") || t.contains("param");
  bool ok;
  if (isBlock) {
    if (const toml::node *n = t.get("name")) {
      const auto *s = n->as_string();
      std::string nm = s ? s->get() : std::string();
      auto it = t.find("name");
      error(locOf(it->first), "param table '" + llvm::Twine(nm) +
                                  "' has both 'name' and '" +
                                  (t.contains("repeat") ? "repeat" : "param") +
                                  "'; a table is either a param (with 'name') or a "
                                  "repeat block (with 'repeat' and nested [[param.param]])");
      failed_ = true;
      return false;
    }
    if (depth + 1 > kMaxBlockDepth) {
      error(locOf(t), "repeat blocks are nested more than " + llvm::Twine(kMaxBlockDepth) +
                          " deep");
      failed_ = true;
      return false;
    }
    ok = parseBlock(t, item, depth + 1);
  } else {
    ok = parseLeaf(t, item);
  }
  if (ok)
    out.push_back(std::move(item));
  return ok;
}

bool TomlFrontend::parseBlock(const toml::table &t, Item &item, int depth) {
  std::string prefixText;
  if (const toml::node *p = t.get("prefix"))
    if (const auto *s = p->as_string())
      prefixText = s->get();
  std::string fullPrefix = displayPrefix() + prefixText;
  std::string who =
      "repeat block" + (fullPrefix.empty() ? std::string() : " '" + fullPrefix + "'");
  bool ok = true;

  for (auto &&[k, v] : t) {
    std::string_view key = k.str();
    if (key == "repeat" || key == "start" || key == "index" || key == "prefix" ||
        key == "param" || key == "dtype" || key == "placements" || key == "optimizer" ||
        key == "route")
      continue;
    unknownKey(k, who, true);
    ok = false;
  }

  // repeat / start.
  if (const toml::node *r = t.get("repeat")) {
    const auto *iv = r->as_integer();
    if (!iv) {
      error(locOf(*r), "'repeat' in " + who + " must be an integer, not " + tomlTypeName(*r));
      ok = false;
    } else if (iv->get() < 1) {
      error(locOf(*r), "'repeat' in " + who + " must be at least 1, not " +
                           std::to_string(iv->get()));
      ok = false;
    } else {
      item.repeat = iv->get();
      item.repeatLoc = locOf(*r);
    }
  }
  if (const toml::node *s = t.get("start")) {
    const auto *iv = s->as_integer();
    if (!iv) {
      error(locOf(*s), "'start' in " + who + " must be an integer, not " + tomlTypeName(*s));
      ok = false;
    } else if (iv->get() < 0) {
      error(locOf(*s), "'start' in " + who + " must not be negative, not " +
                           std::to_string(iv->get()));
      ok = false;
    } else {
      item.start = iv->get();
    }
  }
  if (item.start > INT64_MAX - item.repeat) {
    error(locOf(t), "'start' + 'repeat' overflows in " + who);
    ok = false;
  }

  // index.
  std::string indexName = "i";
  if (const toml::node *ix = t.get("index")) {
    const auto *s = ix->as_string();
    if (!s) {
      error(locOf(*ix), "'index' in " + who + " must be a string, not " + tomlTypeName(*ix));
      ok = false;
    } else {
      const std::string &n = s->get();
      bool valid = !n.empty() && !std::isdigit(static_cast<unsigned char>(n[0]));
      for (char c : n)
        valid &= std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      if (!valid) {
        error(locOf(*ix), "'index' in " + who + " must be an identifier such as \"i\", not '" +
                              n + "'");
        ok = false;
      } else {
        indexName = n;
      }
    }
  }
  for (const Scope &s : scopes_)
    if (s.name == indexName) {
      const toml::node *ix = t.get("index");
      error(ix ? locOf(*ix) : locOf(t),
            "placeholder '" + indexName + "' of " + who +
                " is already used by an enclosing repeat block; give this block its own, "
                "e.g. index = \"j\"");
      ok = false;
      break;
    }

  Defaults d = defaults_.empty() ? Defaults{} : defaults_.back();
  Defaults own;
  if (parseDefaults(t, who, own)) {
    if (own.dtype)
      d.dtype = own.dtype;
    if (own.placements)
      d.placements = own.placements;
    if (own.role)
      d.role = own.role;
    if (own.route)
      d.route = own.route;
  } else {
    ok = false;
  }

  // The prefix sees this block's placeholder.
  scopes_.push_back(Scope{indexName});
  std::vector<Piece> prefix;
  if (const toml::node *p = t.get("prefix")) {
    if (!p->is_string()) {
      error(locOf(*p), "'prefix' in " + who + " must be a string, not " + tomlTypeName(*p));
      ok = false;
    } else if (!parseTemplateString(*p, prefixText, "prefix", prefix)) {
      ok = false;
    }
  }

  const toml::node *children = t.get("param");
  if (!children) {
    error(locOf(t), who + " has no nested params; add [[param.param]] tables under it");
    ok = false;
  } else if (ok) {
    prefixPieces_.push_back(std::move(prefix));
    prefixText_.push_back(prefixText);
    defaults_.push_back(std::move(d));
    ok = parseParamArray(*children, "in " + who, item.children, depth);
    defaults_.pop_back();
    prefixText_.pop_back();
    prefixPieces_.pop_back();
  }
  scopes_.pop_back();
  if (!ok)
    failed_ = true;
  return ok;
}

bool TomlFrontend::parseLeaf(const toml::table &t, Item &item) {
  LeafTemplate leaf;
  bool ok = true;

  // The name first, so that every other message can name the param.
  std::string nameText;
  const toml::node *nameNode = t.get("name");
  if (nameNode) {
    if (const auto *s = nameNode->as_string())
      nameText = s->get();
  }
  std::string display = displayPrefix() + nameText;
  std::string who = nameNode && nameNode->is_string() ? "param '" + display + "'"
                                                       : std::string("a param without a name");

  if (!nameNode) {
    error(locOf(t), "param has no 'name'" +
                        (prefixText_.empty() ? std::string()
                                             : " (in repeat block '" + displayPrefix() + "')"));
    ok = false;
  } else if (!nameNode->is_string()) {
    error(locOf(*nameNode), "'name' must be a string, not " + llvm::Twine(tomlTypeName(*nameNode)));
    ok = false;
  } else if (nameText.empty() && prefixText_.empty()) {
    error(locOf(*nameNode), "param name is empty");
    ok = false;
  }

  for (auto &&[k, v] : t) {
    std::string_view key = k.str();
    if (key == "name" || key == "shape" || key == "dtype" || key == "placements" ||
        key == "optimizer" || key == "route" || key == "conv" || key == "qk_clip")
      continue;
    unknownKey(k, who, false);
    ok = false;
  }

  if (nameNode && nameNode->is_string()) {
    ok &= parseScopedName(*nameNode, nameText, "name", leaf.pieces);
  }

  // shape.
  const toml::node *shape = t.get("shape");
  if (!shape) {
    error(nameNode ? locOf(*nameNode) : locOf(t), who + " has no 'shape'");
    ok = false;
  } else if (const auto *a = shape->as_array()) {
    if (a->empty()) {
      error(locOf(*shape), "'shape' of " + who + " is empty; give at least one dim");
      ok = false;
    }
    leaf.shape.reserve(a->size());
    for (size_t i = 0; i < a->size(); ++i) {
      const toml::node &dn = (*a)[i];
      const auto *iv = dn.as_integer();
      if (!iv) {
        error(locOf(dn), "dim " + std::to_string(i) + " of " + who +
                             " must be an integer, not " + tomlTypeName(dn));
        ok = false;
      } else if (iv->get() <= 0) {
        error(locOf(dn), "dim " + std::to_string(i) + " of " + who +
                             " must be positive, not " + std::to_string(iv->get()));
        ok = false;
      } else {
        leaf.shape.push_back(iv->get());
      }
    }
  } else {
    error(locOf(*shape), "'shape' of " + who + " must be an array of integers, not " +
                             tomlTypeName(*shape));
    ok = false;
  }

  // dtype, placements, optimizer: own value, else the enclosing block's, else
  // [model]'s, else the built-in default.
  Defaults own;
  ok &= parseDefaults(t, who, own);
  const Defaults *inherited = defaults_.empty() ? nullptr : &defaults_.back();
  leaf.dtype = own.dtype                        ? *own.dtype
               : inherited && inherited->dtype ? *inherited->dtype
               : modelDType_                    ? *modelDType_
                                                : DType::f32;
  if (own.placements)
    leaf.placements = std::move(*own.placements);
  else if (inherited && inherited->placements)
    leaf.placements = *inherited->placements;
  else
    leaf.placements.assign(model_.mesh.dims.size(), Placement{});
  leaf.role = own.role ? own.role : inherited ? inherited->role : std::nullopt;
  leaf.route = own.route ? own.route : inherited ? inherited->route : std::nullopt;
  leaf.routeInherited = !own.route;

  if (const toml::node *c = t.get("conv")) {
    if (const auto *b = c->as_boolean()) {
      leaf.conv = b->get();
    } else {
      error(locOf(*c), "'conv' in " + who + " must be true or false, not " + tomlTypeName(*c));
      ok = false;
    }
  }

  if (const toml::node *q = t.get("qk_clip")) {
    QkClipTemplate qk;
    if (parseQkClip(*q, who, qk))
      leaf.qkClip = std::move(qk);
    else
      ok = false;
  }

  if (!ok) {
    failed_ = true;
    return false;
  }
  leaf.display = std::move(display);
  leaf.loc = nameNode ? locOf(t.find("name")->first) : locOf(t);
  leaf.sourceLoc = diags_.describe(leaf.loc);
  item.leaf = static_cast<int>(leaves_.size());
  leaves_.push_back(std::move(leaf));
  return true;
}

// qk_clip = { key = "k.weight", heads = 4, head_dim = 32, key_heads = 2 }
bool TomlFrontend::parseQkClip(const toml::node &value, const std::string &who,
                               QkClipTemplate &tmpl) {
  QkClipPair &out = tmpl.pair;
  const std::string where = "qk_clip of " + who;
  const toml::table *t = value.as_table();
  if (!t) {
    error(locOf(value), "'qk_clip' in " + who +
                            " must be a table such as { key = \"k.weight\", heads = 4, "
                            "head_dim = 32 }, not " + tomlTypeName(value));
    return false;
  }
  out.loc = locOf(value);
  bool ok = true;
  static const char *const keys[] = {"key", "heads", "head_dim", "key_heads"};
  for (auto &&[k, v] : *t) {
    llvm::StringRef key(k.str());
    if (llvm::is_contained(keys, key))
      continue;
    std::string hint = didYouMean(key, keys);
    error(locOf(k), "unknown key '" + key.str() + "' in " + where +
                        (hint.empty() ? " (expected key, heads, head_dim, key_heads)" : hint));
    ok = false;
  }
  // A positive count no larger than a plan's int.
  auto count = [&](const char *name, bool required, int64_t &field) {
    const toml::node *n = t->get(name);
    if (!n) {
      if (required) {
        error(out.loc, where + " has no '" + name + "'");
        ok = false;
      }
      return;
    }
    const auto *iv = n->as_integer();
    if (!iv) {
      error(locOf(*n), "'" + llvm::Twine(name) + "' in " + where + " must be an integer, not " +
                           tomlTypeName(*n));
      ok = false;
    } else if (iv->get() < 1 || iv->get() > INT32_MAX) {
      error(locOf(*n), "'" + llvm::Twine(name) + "' in " + where + " must be between 1 and " +
                           llvm::Twine(INT32_MAX) + ", not " + llvm::Twine(iv->get()));
      ok = false;
    } else {
      field = iv->get();
    }
  };
  count("heads", true, out.heads);
  count("head_dim", true, out.headDim);
  count("key_heads", false, out.keyHeads);
  if (const toml::node *kh = t->get("key_heads"); kh && out.heads > 0 && out.keyHeads > 0 &&
                                                  out.heads % out.keyHeads != 0) {
    error(locOf(*kh), "'key_heads' in " + where + " must divide 'heads' = " +
                          llvm::Twine(out.heads) +
                          " (each key head serves an equal group of query heads), not " +
                          llvm::Twine(out.keyHeads));
    ok = false;
  }
  if (out.keyHeads == 0)
    out.keyHeads = out.heads;

  const toml::node *key = t->get("key");
  if (!key) {
    error(out.loc, where + " has no 'key' (the name of the key projection it pairs with)");
    return false;
  }
  if (!key->is_string()) {
    error(locOf(*key), "'key' in " + where + " must be a string, not " + tomlTypeName(*key));
    return false;
  }
  out.keyLoc = locOf(*key);
  return parseScopedName(*key, key->as_string()->get(), "key", tmpl.keyPieces) && ok;
}

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
    p.shape = leaf.shape;
    p.dtype = leaf.dtype;
    p.placements = leaf.placements;
    p.conv = leaf.conv;
    p.roleOverride = leaf.role;
    p.routeOverride = leaf.route;
    p.routeOverrideInherited = leaf.routeInherited;
    p.loc = leaf.loc;
    p.sourceLoc = leaf.sourceLoc;
    model_.params.push_back(std::move(p));
    const std::string &name = model_.params.back().name;
    uint32_t idx = static_cast<uint32_t>(model_.params.size() - 1);
    if (leaf.qkClip) {
      QkClipPair pair = leaf.qkClip->pair;
      pair.query = static_cast<int>(idx);
      pair.keyName = substitute(leaf.qkClip->keyPieces);
      model_.qkClip.push_back(std::move(pair));
    }
    auto [pos, inserted] = seen_.try_emplace(std::string_view(name), idx);
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

bool TomlFrontend::run(const std::string_view *source) {
  std::unique_ptr<llvm::MemoryBuffer> mb;
  if (source) {
    mb = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(source->data(), source->size()),
                                              path_);
  } else {
    mb = readInputFile(path_, diags_, kMaxManifestBytes, "a TOML manifest");
    if (!mb)
      return false;
    if (mb->getBufferIdentifier() != path_)
      mb = llvm::MemoryBuffer::getMemBufferCopy(mb->getBuffer(), path_);
  }
  bufStart_ = mb->getBufferStart();
  bufSize_ = mb->getBufferSize();
  buffer_ = diags_.addBuffer(std::move(mb));
  buildLineTable();

  std::string_view text(bufStart_, bufSize_);
  if (!checkTomlKeyDepth(text, buffer_, diags_, 1000))
    return false;
  toml::table root;
  if (!parseTomlLocated(
          text, path_, diags_, [&](const toml::source_position &p) { return locOf(p); }, root))
    return false;

  model_.modelName = llvm::sys::path::stem(path_).str();

  std::vector<Item> items;
  const toml::node *params = nullptr;
  for (auto &&[k, v] : root) {
    if (k.str() == "model") {
      parseModelTable(v);
    } else if (k.str() == "param") {
      params = &v;
    } else {
      error(locOf(k), std::string(v.is_table() ? "unknown top-level table '"
                                               : "unknown top-level key '") +
                          std::string(k.str()) + "' (a manifest has [model] and [[param]])");
      failed_ = true;
    }
  }
  // [model] first: its dtype is every param's default.
  if (params)
    parseParamArray(*params, "at the top level", items, 0);
  if (failed_)
    return false;
  if (items.empty()) {
    diags_.fileError(path_, "the manifest declares no params (add [[param]] tables)");
    return false;
  }

  int64_t total = countParams(items);
  if (total > kMaxParams) {
    std::string msg = "the manifest expands to more than " + std::to_string(kMaxParams) +
                      " params, the most dmuonc accepts";
    if (overflowLoc_.isValid())
      error(overflowLoc_, msg);
    else
      diags_.fileError(path_, msg);
    return false;
  }
  model_.params.reserve(model_.params.size() + static_cast<size_t>(total));
  seen_.reserve(static_cast<size_t>(total));
  leafOfParam_.reserve(model_.params.size() + static_cast<size_t>(total));
  for (size_t i = 0; i < model_.params.size(); ++i) {
    seen_.try_emplace(std::string_view(model_.params[i].name), static_cast<uint32_t>(i));
    leafOfParam_.push_back(-1);
  }
  expand(items);
  return !failed_;
}

} // namespace

namespace {

bool loadToml(const std::string &path, const std::string_view *text, PlanModel &model,
              Diagnostics &diags) {
  try {
    TomlFrontend fe(path, model, diags);
    return fe.run(text);
  } catch (const std::bad_alloc &) {
    diags.fileError(path, "out of memory while reading the manifest");
  } catch (const std::exception &e) {
    diags.fileError(path, e.what());
  }
  return false;
}

} // namespace

bool loadTomlManifest(const std::string &path, PlanModel &model, Diagnostics &diags) {
  return loadToml(path, nullptr, model, diags);
}

bool loadTomlManifestFromBuffer(std::string_view text, const std::string &name,
                                PlanModel &model, Diagnostics &diags) {
  return loadToml(name, &text, model, diags);
}

} // namespace dmuon
