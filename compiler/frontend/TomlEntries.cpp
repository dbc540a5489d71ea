// The TOML manifest's param tables and repeat blocks, each checked once per
// template (docs/manifest-format.md).
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
        if (std::string why = common::paramNameProblem(s->get()); !why.empty()) {
          error(locOf(v), "model name '" + common::printableName(s->get()) + "' " + why +
                              "; a model name follows the param names' rule (" +
                              common::paramNameRuleText() + ")");
          failed_ = true;
        }
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
  // At least one item and one leaf per table: a flat manifest of a million
  // params grows neither vector by copying.
  out.reserve(out.size() + a->size());
  leaves_.reserve(leaves_.size() + a->size());
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
    if (key == "repeat" || key == "start" || key == "index" || key == "prefix" || key == "param" ||
        key == "dtype" || key == "placements" || key == "optimizer" || key == "route" ||
        key == "stage")
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
    if (own.optimizer)
      d.optimizer = own.optimizer;
    if (own.route)
      d.route = own.route;
    ok &= mergeStage(own, defaults_.empty() ? nullptr : &defaults_.back(), who, d);
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
        key == "optimizer" || key == "route" || key == "conv" || key == "qk_clip" ||
        key == "heads" || key == "ns_split" || key == "ns_split_dim" || key == "stage")
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
  leaf.optimizer = own.optimizer ? own.optimizer : inherited ? inherited->optimizer : std::nullopt;
  leaf.route = own.route ? own.route : inherited ? inherited->route : std::nullopt;
  leaf.routeInherited = !own.route;
  if (Defaults staged; !mergeStage(own, inherited, who, staged)) {
    ok = false;
  } else if (staged.stage) {
    leaf.stage = *staged.stage;
    leaf.stageLoc = staged.stageLoc;
  }

  if (const toml::node *c = t.get("conv")) {
    if (const auto *b = c->as_boolean()) {
      leaf.conv = b->get();
    } else {
      error(locOf(*c), "'conv' in " + who + " must be true or false, not " + tomlTypeName(*c));
      ok = false;
    }
  }

  ok &= parseBlocks(t, who, leaf.blocks);

  if (const toml::node *q = t.get("qk_clip")) {
    auto qk = std::make_unique<QkClipTemplate>();
    if (parseQkClip(*q, who, *qk))
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

// heads = H (H equal blocks of rows), or ns_split = N (N equal blocks) or
// [a, b, ...] (their sizes) with ns_split_dim = "rows" (the default) or
// "cols": checked against the matrix in passes/NsBlocks.cpp.
bool TomlFrontend::parseBlocks(const toml::table &t, const std::string &who,
                               std::shared_ptr<const MatrixBlocks> &out) {
  const toml::node *heads = t.get("heads"), *split = t.get("ns_split"),
                   *dim = t.get("ns_split_dim");
  if (!heads && !split && !dim)
    return true;
  auto blocks = std::make_shared<MatrixBlocks>();
  blocks->dim = plan::BlockDim::rows;
  auto positive = [&](const toml::node &n, const llvm::Twine &what, int64_t &field) {
    const auto *iv = n.as_integer();
    if (!iv) {
      error(locOf(n), what + " in " + who + " must be an integer, not " + tomlTypeName(n));
      return false;
    }
    if (iv->get() < 1 || iv->get() > INT32_MAX) {
      error(locOf(n), what + " in " + who + " must be between 1 and " + llvm::Twine(INT32_MAX) +
                          ", not " + llvm::Twine(iv->get()));
      return false;
    }
    field = iv->get();
    return true;
  };
  if (heads && (split || dim)) {
    error(locOf(*(split ? split : dim)),
          "'" + llvm::Twine(split ? "ns_split" : "ns_split_dim") + "' in " + who +
              " cannot be combined with 'heads' (heads = H splits the rows in H equal blocks)");
    return false;
  }
  if (heads) {
    blocks->source = plan::BlockSource::manifest_heads;
    blocks->loc = locOf(*heads);
    if (!positive(*heads, "'heads'", blocks->count))
      return false;
    out = std::move(blocks);
    return true;
  }
  if (!split) {
    error(locOf(*dim), "'ns_split_dim' in " + who + " needs 'ns_split' (the block sizes)");
    return false;
  }
  blocks->source = plan::BlockSource::manifest_split;
  blocks->loc = locOf(*split);
  if (dim) {
    const auto *sv = dim->as_string();
    if (!sv || (sv->get() != "rows" && sv->get() != "cols")) {
      error(locOf(*dim), "'ns_split_dim' in " + who + " must be \"rows\" or \"cols\", not " +
                             (sv ? "\"" + sv->get() + "\"" : std::string(tomlTypeName(*dim))));
      return false;
    }
    blocks->dim = sv->get() == "rows" ? plan::BlockDim::rows : plan::BlockDim::cols;
  }
  if (split->is_integer()) {
    if (!positive(*split, "'ns_split'", blocks->count))
      return false;
  } else if (const auto *a = split->as_array()) {
    if (a->empty()) {
      error(locOf(*split), "'ns_split' in " + who + " is empty; give the block sizes");
      return false;
    }
    for (size_t i = 0; i < a->size(); ++i) {
      int64_t size = 0;
      if (!positive((*a)[i], "block " + llvm::Twine(i) + " of 'ns_split'", size))
        return false;
      blocks->sizes.push_back(size);
    }
  } else {
    error(locOf(*split), "'ns_split' in " + who +
                             " must be a block count or an array of block sizes, not " +
                             tomlTypeName(*split));
    return false;
  }
  out = std::move(blocks);
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

} // namespace dmuon::toml_manifest
