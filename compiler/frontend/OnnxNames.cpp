// How torch.onnx.export writes parameters, and how to read them back
// (docs/exporting-from-pytorch.md). In training mode without constant
// folding every parameter is an initializer under its own name; the default
// export (eval, folding on) rewrites them:
//   - a Linear applied to a 3-D input becomes MatMul(x, Transpose(W)), and
//     folding stores Transpose(W) as `onnx::MatMul_N` of shape [in, out];
//     MultiheadAttention's in_proj_weight and torchvision's functional
//     attention the same way, inside the parent module's scope;
//   - BatchNorm is folded into the preceding Conv (`onnx::Conv_N`, weight
//     and a bias torch never had);
//   - other computations on parameters become constants (`onnx::Add_N`).
// Recovery uses only what the graph proves: the bias the MatMul's output is
// added to names the weight, or the scope holds a single Linear-like node.
#include "OnnxNames.h"

#include <cctype>

namespace dmuon {

namespace {

bool isComponent(std::string_view c) {
  if (c.empty())
    return false;
  for (char ch : c)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_')
      return false;
  return true;
}

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.size() > prefix.size() && s.substr(0, prefix.size()) == prefix;
}

// Ops through which a tensor's values reach later nodes unchanged (moved,
// sliced, viewed): a gradient would flow back through them.
bool passesValues(std::string_view op) {
  return op == "Slice" || op == "Reshape" || op == "Unsqueeze" || op == "Squeeze" ||
         op == "Expand" || op == "Transpose" || op == "Identity" || op == "Flatten";
}

// Ops whose result has no gradient with respect to this input.
bool stopsGradient(std::string_view op, int input) {
  return op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" ||
         op == "GreaterOrEqual" || op == "Not" || op == "Shape" || op == "Size" ||
         op == "NonZero" || op == "ArgMax" || op == "ArgMin" || (op == "Where" && input == 0);
}

} // namespace

bool isModulePath(std::string_view s) {
  if (s.empty())
    return false;
  size_t b = 0;
  while (true) {
    size_t e = s.find('.', b);
    if (!isComponent(s.substr(b, e == std::string_view::npos ? e : e - b)))
      return false;
    if (e == std::string_view::npos)
      return true;
    b = e + 1;
  }
}

std::string modulePathOfNode(std::string_view node) {
  if (node.size() < 2 || node[0] != '/')
    return {};
  size_t last = node.rfind('/');
  if (last == 0)
    return {}; // "/MatMul": the root module
  std::string_view mod = node.substr(1, last - 1);
  std::string path;
  std::string_view previous; // the previous scope segment
  size_t previousAt = 0;     // where it starts in `path`
  size_t b = 0;
  while (true) {
    size_t e = mod.find('/', b);
    std::string_view comp = mod.substr(b, e == std::string_view::npos ? e : e - b);
    if (!isModulePath(comp))
      return {};
    if (!previous.empty() && startsWith(comp, std::string(previous) + ".")) {
      // "/features/features.1": the child's segment repeats its parent's.
      path.resize(previousAt);
    } else if (!path.empty()) {
      path += '.';
    }
    previousAt = path.size();
    path += comp;
    previous = comp;
    if (e == std::string_view::npos)
      break;
    b = e + 1;
  }
  return path;
}

void OnnxNameResolver::indexValues() {
  indexed_ = true;
  const OnnxNodeList &g = view_.graph;
  for (const OnnxNode &n : g.nodes) {
    llvm::ArrayRef<std::string_view> in = g.inputsOf(n);
    for (size_t i = 0; i < in.size(); ++i)
      consumers_[llvm::StringRef(in[i].data(), in[i].size())].push_back(
          OnnxUse{&n, static_cast<int>(i)});
  }
}

void OnnxNameResolver::countScopes() {
  scopesCounted_ = true;
  const OnnxNodeList &g = view_.graph;
  for (const OnnxNode &n : g.nodes) {
    if (n.opType != "MatMul" && n.opType != "Gemm")
      continue;
    llvm::ArrayRef<std::string_view> in = g.inputsOf(n);
    if (in.size() > 1 && index_.count(llvm::StringRef(in[1].data(), in[1].size())))
      ++linearsInScope_[modulePathOfNode(n.name)];
  }
}

// Whether no use of `value` can pass a gradient back to it: every path from
// it ends in a comparison, a shape query or a Where's condition (a causal
// mask kept as a float buffer). Bounded: a long chain counts as trained.
bool OnnxNameResolver::gradientFree(std::string_view value) {
  if (!indexed_)
    indexValues();
  constexpr int kMaxVisited = 64;
  std::vector<std::string_view> work = {value};
  int visited = 0;
  bool reached = false; // some use found at all
  while (!work.empty()) {
    std::string_view v = work.back();
    work.pop_back();
    auto it = consumers_.find(llvm::StringRef(v.data(), v.size()));
    if (it == consumers_.end())
      continue;
    for (const OnnxUse &u : it->second) {
      if (++visited > kMaxVisited)
        return false;
      reached = true;
      if (stopsGradient(u.node->opType, u.input))
        continue;
      if (!passesValues(u.node->opType) || u.input != 0)
        return false;
      for (std::string_view out : view_.graph.outputsOf(*u.node))
        work.push_back(out);
    }
  }
  return reached;
}

std::string OnnxNameResolver::biasOwnerWeight(std::string_view value, int64_t size) const {
  auto it = index_.find(llvm::StringRef(value.data(), value.size()));
  if (it == index_.end())
    return {};
  const OnnxInitializer &b = *inits_[it->second];
  std::string_view name = b.name;
  if (!isModulePath(name) || b.numDims != 1 || view_.dimsOf(b)[0] != size)
    return {};
  if (name.size() < 4 || name.substr(name.size() - 4) != "bias")
    return {};
  // `<P>.bias` -> `<P>.weight`; MultiheadAttention's `in_proj_bias` ->
  // `in_proj_weight`.
  return std::string(name.substr(0, name.size() - 4)) + "weight";
}

// A MatMul's or Gemm's second input, renamed by folding.
OnnxResolution OnnxNameResolver::resolveLinear(int k, const OnnxNode &node,
                                               std::string_view scope) {
  const OnnxNodeList &g = view_.graph;
  llvm::ArrayRef<int64_t> dims = view_.dimsOf(*inits_[k]);
  const bool gemm = node.opType == "Gemm";
  // MatMul(x, Wᵀ) holds torch's [out, in] weight transposed; so does a Gemm
  // without transB (a Linear's Gemm uses W with transB=1).
  const bool transposed = dims.size() == 2 && (!gemm || g.intAttribute(node, "transB", 0) == 0);
  const int64_t out = dims.empty() ? 0 : transposed ? dims.back() : dims.front();
  std::string weight, how;
  if (gemm) {
    llvm::ArrayRef<std::string_view> in = g.inputsOf(node);
    if (in.size() > 2)
      weight = biasOwnerWeight(in[2], out);
    how = "the Gemm's bias";
  } else {
    if (!indexed_)
      indexValues();
    for (std::string_view y : g.outputsOf(node)) {
      auto it = consumers_.find(llvm::StringRef(y.data(), y.size()));
      if (it == consumers_.end())
        continue;
      for (const OnnxUse &u : it->second)
        if (weight.empty() && u.node->opType == "Add")
          weight = biasOwnerWeight(g.inputsOf(*u.node)[1 - u.input], out);
    }
    how = "the bias added to its output";
  }
  if (weight.empty() && !scope.empty()) {
    if (!scopesCounted_)
      countScopes();
    if (linearsInScope_[std::string(scope)] == 1) {
      weight = std::string(scope) + ".weight";
      how = "the only MatMul/Gemm of module '" + std::string(scope) + "'";
    }
  }
  OnnxResolution r;
  if (weight.empty()) {
    r.kind = OnnxResolution::unrecovered;
    r.why = "consumed by " + std::string(node.opType) + " node '" + std::string(node.name) +
            "', in a module with several such nodes and no named bias";
    return r;
  }
  if (index_.count(weight) || !recoveredNames_.insert(weight).second) {
    r.kind = OnnxResolution::unrecovered;
    r.why = "consumed by node '" + std::string(node.name) + "', whose module's '" + weight +
            "' is already in the model (a tied or duplicated weight)";
    return r;
  }
  r.kind = OnnxResolution::recovered;
  r.name = std::move(weight);
  r.transpose = transposed;
  r.why = "recovered from node '" + std::string(node.name) + "' (" + how + ")" +
          (transposed ? "; a folded transpose: shape transposed back to torch's [out, in]" : "");
  return r;
}

OnnxResolution OnnxNameResolver::resolve(int k, const OnnxUse &use) {
  const OnnxInitializer &t = *inits_[k];
  OnnxResolution r;
  if (use.node && use.node->opType == "BatchNormalization" && (use.input == 3 || use.input == 4)) {
    r.kind = OnnxResolution::buffer;
    r.why = use.input == 3 ? "BatchNorm running mean" : "BatchNorm running variance";
    return r;
  }
  if (isModulePath(t.name)) {
    // A named tensor no gradient reaches: a buffer (a causal mask).
    if (use.node && (passesValues(use.node->opType) || stopsGradient(use.node->opType, use.input)) &&
        gradientFree(t.name)) {
      r.kind = OnnxResolution::buffer;
      r.why = "no gradient reaches it (used only through comparisons or shapes)";
    }
    return r;
  }
  r.kind = OnnxResolution::unrecovered;
  if (!use.node) {
    r.why = "not used by any node";
    return r;
  }
  const OnnxNode &node = *use.node;
  std::string scope = modulePathOfNode(node.name);
  if ((node.opType == "MatMul" || node.opType == "Gemm") && use.input == 1)
    return resolveLinear(k, node, scope);
  if (node.opType == "Conv" && use.input == 1 && !scope.empty()) {
    std::string weight = scope + ".weight";
    if (!index_.count(weight) && recoveredNames_.insert(weight).second) {
      r.kind = OnnxResolution::recovered;
      r.name = std::move(weight);
      r.bnFolded = true;
      r.why = "recovered from node '" + std::string(node.name) +
              "'; a BatchNorm was folded into it";
      return r;
    }
  }
  if (node.opType == "Conv" && use.input == 2)
    r.why = "the bias a BatchNorm folded into Conv node '" + std::string(node.name) +
            "' left; torch has no such parameter";
  else
    r.why = "a constant the exporter computed, consumed by " + std::string(node.opType) +
            " node '" + std::string(node.name) + "'";
  return r;
}

} // namespace dmuon
