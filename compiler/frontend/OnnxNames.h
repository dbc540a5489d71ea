// What an ONNX initializer is to torch (docs/exporting-from-pytorch.md): a
// parameter under its own name, a parameter the exporter renamed whose torch
// name and orientation can be recovered from the graph, a buffer (not
// trained: BatchNorm running statistics, masks), or a constant the exporter
// made that no torch parameter name can be given to.
#pragma once

#include "OnnxWire.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace dmuon {

struct OnnxUse {
  const OnnxNode *node = nullptr;
  int input = -1;
};

struct OnnxResolution {
  enum Kind {
    param,       // a module path already: kept
    recovered,   // renamed by the exporter; `name` is torch's
    buffer,      // not a trained tensor: not planned
    unrecovered, // renamed, and no torch name can be recovered
  } kind = param;
  std::string name;       // recovered: torch's name
  bool transpose = false; // recovered: torch's shape is the last two dims swapped
  bool bnFolded = false;  // recovered: a conv weight with a BatchNorm folded in
  std::string why;        // how it was recovered / why a buffer / why not
};

// "a.b.c": one or more components of letters, digits and '_'.
bool isModulePath(std::string_view s);
// The module path of a node's scope: "/layers.0/linear1/MatMul" ->
// "layers.0.linear1"; torch 1.13 repeats a container's path in its children's
// scopes ("/layer1/layer1.0/conv1/Conv" -> "layer1.0.conv1"). Empty if the
// node name does not have that form or the node is in the root scope.
std::string modulePathOfNode(std::string_view node);

class OnnxNameResolver {
public:
  // `index`: the float initializers' names -> their index in `inits`.
  OnnxNameResolver(const OnnxModelView &view, const llvm::DenseMap<llvm::StringRef, int> &index,
                   const std::vector<const OnnxInitializer *> &inits)
      : view_(view), index_(index), inits_(inits) {}

  // Initializer `k`, first used by `use`.
  OnnxResolution resolve(int k, const OnnxUse &use);

private:
  void indexValues();
  void countScopes();
  bool gradientFree(std::string_view value);
  OnnxResolution resolveLinear(int k, const OnnxNode &node, std::string_view scope);
  // A named 1-D initializer `<P>.bias` / `<P>.<x>_bias` of `size` elements.
  std::string biasOwnerWeight(std::string_view value, int64_t size) const;

  const OnnxModelView &view_;
  const llvm::DenseMap<llvm::StringRef, int> &index_;
  const std::vector<const OnnxInitializer *> &inits_;
  // Built on first need: a large export whose initializers are all named
  // and consumed by the usual ops never pays for them.
  bool indexed_ = false;
  llvm::DenseMap<llvm::StringRef, std::vector<OnnxUse>> consumers_;
  bool scopesCounted_ = false;
  std::unordered_map<std::string, int> linearsInScope_;
  std::unordered_set<std::string> recoveredNames_;
};

} // namespace dmuon
