// The default layer of every param (docs/dmuonc.md#hooks): the module whose
// hooks move it, and whose small params share one unit.
//
// A name under `layers.N`, `blocks.N` or `h.N` keeps that rule (plans of such
// models are what they were). Other models name their repeated blocks in
// every way (`encoder.layer.N`, `block.N`, `encoder_layer_N`, `layerN.M`,
// `features.N.M`), so the rest is found from the model's structure, not its
// words: a block is a numbered module (a path component ending in digits)
// that holds submodules and
//   1. belongs to a family of numbered siblings (the same path up to the
//      digits) of which two or more hold the same params (relative names and
//      shapes): torch's ModuleList / Sequential of one block class; every
//      member counts, the odd first block of a stage (a downsample, T5's
//      relative bias) too; or
//   2. sits where such blocks sit (the same path with every number replaced):
//      a stage of one block (EfficientNet's `features.1.0`) or of blocks that
//      all differ in width (`features.2.0`, `features.2.1`).
// A param's layer is its highest block ancestor (an expert inside a block
// stays in the block); without one, its lowest numbered ancestor that holds
// submodules (a stem or a downsample `features.2`); else its parent module.
#include "Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <string>
#include <vector>

namespace dmuon {

namespace {

bool isDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool isDigit(char c) { return c >= '0' && c <= '9'; }

// Today's rule: the lowest ancestor ending in (layers|blocks|h).N, or npos.
size_t namedLayerLength(std::string_view name) {
  size_t lastDot = name.rfind('.');
  if (lastDot == std::string_view::npos)
    return std::string_view::npos;
  std::string_view path = name.substr(0, lastDot);
  while (true) {
    size_t dot = path.rfind('.');
    if (dot == std::string_view::npos)
      return std::string_view::npos;
    std::string_view index = path.substr(dot + 1);
    std::string_view rest = path.substr(0, dot);
    size_t prev = rest.rfind('.');
    std::string_view container = prev == std::string_view::npos ? rest : rest.substr(prev + 1);
    bool digits = !index.empty();
    for (char c : index)
      digits = digits && isDigit(c);
    if (digits && (container == "layers" || container == "blocks" || container == "h"))
      return path.size();
    path = rest;
  }
}

// A module path's family: the path without the digits that end it ("" when
// it does not end in digits: not a numbered module).
llvm::StringRef familyOf(llvm::StringRef module) {
  size_t n = module.size();
  while (n > 0 && isDigit(module[n - 1]))
    --n;
  if (n == module.size())
    return {};
  return module.substr(0, n);
}

// The path with every run of digits that ends a component replaced by '#':
// where in the model a module sits.
std::string positionOf(llvm::StringRef module) {
  std::string out;
  out.reserve(module.size());
  for (size_t i = 0; i < module.size(); ++i) {
    if (isDigit(module[i])) {
      size_t j = i;
      while (j < module.size() && isDigit(module[j]))
        ++j;
      if (j == module.size() || module[j] == '.') {
        out += '#';
        i = j - 1;
        continue;
      }
    }
    out += module[i];
  }
  return out;
}

struct ModuleInfo {
  uint64_t signature = 0; // sum of its params' (relative name, shape) hashes
  uint32_t params = 0;
  bool composite = false; // holds a param of a submodule
};

} // namespace

void assignDefaultLayers(PlanModel &model) {
  // The modules (prefixes of param names, viewed in place) above params
  // that today's rule does not place.
  llvm::DenseMap<llvm::StringRef, ModuleInfo> modules;
  std::vector<bool> named(model.params.size());
  for (size_t i = 0; i < model.params.size(); ++i) {
    Param &p = model.params[i];
    size_t len = namedLayerLength(p.name);
    named[i] = len != std::string_view::npos;
    if (named[i]) {
      p.defaultLayerLen = static_cast<int64_t>(len);
      continue;
    }
    llvm::StringRef name(p.name);
    for (size_t dot = name.rfind('.'); dot != llvm::StringRef::npos && dot > 0;
         dot = name.rfind('.', dot - 1)) {
      llvm::StringRef module = name.substr(0, dot), rel = name.substr(dot + 1);
      ModuleInfo &m = modules[module];
      m.signature += llvm::hash_combine(
          rel, llvm::hash_combine_range(p.shape.begin(), p.shape.end()));
      ++m.params;
      m.composite = m.composite || rel.contains('.');
    }
  }
  // Families in which two composite members hold the same params.
  llvm::DenseMap<llvm::StringRef, llvm::DenseMap<uint64_t, int>> seen;
  llvm::DenseSet<llvm::StringRef> repeated;
  for (auto &[module, m] : modules) {
    llvm::StringRef family = familyOf(module);
    if (family.empty() || !m.composite)
      continue;
    uint64_t key = llvm::hash_combine(m.signature, m.params);
    if (++seen[family][key] == 2)
      repeated.insert(family);
  }
  std::vector<std::string> positionsHeld; // DenseSet keys view these
  llvm::DenseSet<llvm::StringRef> blockPositions;
  for (auto &[module, m] : modules)
    if (m.composite && repeated.count(familyOf(module)))
      positionsHeld.push_back(positionOf(module));
  for (const std::string &s : positionsHeld)
    blockPositions.insert(s);

  for (size_t i = 0; i < model.params.size(); ++i) {
    if (named[i])
      continue;
    Param &p = model.params[i];
    llvm::StringRef name(p.name);
    size_t parent = name.rfind('.');
    int64_t block = -1, numbered = -1;
    for (size_t dot = parent; dot != llvm::StringRef::npos && dot > 0;
         dot = name.rfind('.', dot - 1)) {
      llvm::StringRef module = name.substr(0, dot);
      const ModuleInfo &m = modules.find(module)->second;
      llvm::StringRef family = familyOf(module);
      if (family.empty() || !m.composite)
        continue;
      if (numbered < 0)
        numbered = static_cast<int64_t>(dot);
      if (repeated.count(family) || blockPositions.count(positionOf(module)))
        block = static_cast<int64_t>(dot); // walking up: the highest wins
    }
    p.defaultLayerLen = block >= 0      ? block
                        : numbered >= 0 ? numbered
                        : parent == llvm::StringRef::npos ? 0
                                                          : static_cast<int64_t>(parent);
  }
}

std::string_view defaultLayerViewOf(std::string_view paramName) {
  size_t lastDot = paramName.rfind('.');
  if (lastDot == std::string_view::npos)
    return {};
  std::string_view module(paramName.data(), lastDot);
  // Walk ancestors from the deepest: the first "<...>.(layers|blocks|h).N" wins.
  std::string_view path = module;
  while (true) {
    size_t dot = path.rfind('.');
    if (dot != std::string_view::npos) {
      std::string_view index = path.substr(dot + 1);
      std::string_view rest = path.substr(0, dot);
      size_t prev = rest.rfind('.');
      std::string_view container = prev == std::string_view::npos ? rest : rest.substr(prev + 1);
      if (isDigits(index) && (container == "layers" || container == "blocks" || container == "h"))
        return path;
      path = rest;
    } else {
      break;
    }
  }
  return module;
}

std::string defaultLayerOf(const std::string &paramName) {
  return std::string(defaultLayerViewOf(paramName));
}

std::string_view defaultLayerViewOf(const Param &p) {
  if (p.defaultLayerLen < 0)
    return defaultLayerViewOf(p.name);
  return std::string_view(p.name).substr(0, static_cast<size_t>(p.defaultLayerLen));
}

} // namespace dmuon
