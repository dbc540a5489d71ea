// The TOML manifest frontend (docs/manifest-format.md).
//
// The manifest is parsed by toml++ into a tree, checked once per template
// (a [[param]] table, possibly inside repeat blocks), and then expanded copy by
// copy into PlanModel::params in file order. All checks that do not depend on
// the copy index run once per template, so a 61-layer x 384-expert manifest
// costs one name substitution and one hash insert per param. This file: source
// locations, the values of a param's keys, and the run.
#include "TomlManifest.h"

#include "common/MatrixOptimizers.h"
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

namespace dmuon {
namespace toml_manifest {

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
  static const char *const leafKeys[] = {
      "name",  "shape",   "dtype", "placements", "optimizer",    "route",
      "conv",  "qk_clip", "heads", "ns_split",   "ns_split_dim", "stage"};
  static const char *const blockKeys[] = {"repeat", "start",      "index",     "prefix", "param",
                                          "dtype",  "placements", "optimizer", "route",  "stage"};
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

bool TomlFrontend::parseOptimizerValue(const toml::node &value, const std::string &who,
                                       OptimizerChoice &out) {
  const auto *s = value.as_string();
  if (!s) {
    error(locOf(value), "'optimizer' in " + who + " must be a string, not " +
                            tomlTypeName(value));
    return false;
  }
  if (s->get() == "adamw") {
    out = {Role::adamw, MatrixOptimizer::muon};
    return true;
  }
  if (std::optional<MatrixOptimizer> m = common::parseMatrixOptimizer(s->get())) {
    out = {Role::muon, *m};
    return true;
  }
  error(locOf(value), "unknown optimizer '" + s->get() + "' in " + who + " (expected " +
                          common::kMatrixOptimizerNames + " or \"adamw\")");
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
    OptimizerChoice c;
    if (parseOptimizerValue(*v, who, c))
      d.optimizer = c;
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
  if (const toml::node *v = t.get("stage")) {
    const auto *iv = v->as_integer();
    if (!iv) {
      error(locOf(*v), "'stage' in " + who + " must be an integer, not " + tomlTypeName(*v));
      ok = false;
    } else if (iv->get() < 0 || iv->get() > kMaxMeshRanks) {
      error(locOf(*v), "'stage' in " + who + " must be a pipeline stage index (0 or more), not " +
                           std::to_string(iv->get()));
      ok = false;
    } else {
      d.stage = static_cast<int>(iv->get());
      d.stageLoc = locOf(*v);
    }
  }
  return ok;
}

bool TomlFrontend::mergeStage(const Defaults &own, const Defaults *inherited,
                              const std::string &who, Defaults &into) {
  if (!own.stage) {
    if (inherited) {
      into.stage = inherited->stage;
      into.stageLoc = inherited->stageLoc;
    }
    return true;
  }
  if (inherited && inherited->stage && *inherited->stage != *own.stage) {
    error(own.stageLoc, "'stage = " + std::to_string(*own.stage) + "' in " + who +
                            " puts a param on a second pipeline stage: its enclosing block "
                            "says stage " +
                            std::to_string(*inherited->stage) + " (" +
                            diags_.describe(inherited->stageLoc) +
                            "); a param belongs to one stage");
    return false;
  }
  into.stage = own.stage;
  into.stageLoc = own.stageLoc;
  return true;
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
  // The templates hold copies of everything expansion reads: the tree goes
  // now, so the params reuse its memory instead of faulting in fresh pages
  // (a [[param]] table is several hundred bytes of nodes).
  params = nullptr;
  root.clear();
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
    seen_.try_emplace(llvm::StringRef(model_.params[i].name), static_cast<uint32_t>(i));
    leafOfParam_.push_back(-1);
  }
  expand(items);
  return !failed_;
}

} // namespace toml_manifest

namespace {

bool loadToml(const std::string &path, const std::string_view *text, PlanModel &model,
              Diagnostics &diags) {
  try {
    toml_manifest::TomlFrontend fe(path, model, diags);
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