// The ONNX frontend: params are the graph's floating-point initializers. Only
// names, dims and data types are read; tensor data (raw_data or external data
// files) is never touched, so models whose external data is absent work.
//
// Exporters rename weights after constant folding (`onnx::MatMul_507`); the
// module path is then recovered from the first consuming node's name
// (`/layers.0/linear1/MatMul` -> `layers.0.linear1.weight`), docs/dmuonc.md.
#include "Frontend.h"
#include "OnnxWire.h"
#include "common/ParamNames.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/onnx_pb.h>

#include <cctype>
#include <climits>
#include <string_view>
#include <system_error>
#include <unordered_set>

namespace dmuon {

namespace {

std::optional<DType> dtypeOf(int32_t onnxType) {
  switch (onnxType) {
  case onnx::TensorProto::FLOAT:
    return DType::f32;
  case onnx::TensorProto::BFLOAT16:
    return DType::bf16;
  case onnx::TensorProto::FLOAT16:
    return DType::f16;
  case onnx::TensorProto::DOUBLE:
    return DType::f64;
  default:
    return std::nullopt;
  }
}

bool isComponent(std::string_view c) {
  if (c.empty())
    return false;
  for (char ch : c)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_')
      return false;
  return true;
}

// `a.b.c`: one or more components of letters, digits and '_'.
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

// "/layers.0/linear1/MatMul" -> "layers.0.linear1"; empty if the node name
// does not have that form.
std::string modulePathOfNode(std::string_view node) {
  if (node.size() < 2 || node[0] != '/')
    return {};
  size_t last = node.rfind('/');
  if (last == 0)
    return {}; // "/MatMul": the root module
  std::string_view mod = node.substr(1, last - 1);
  std::string path;
  size_t b = 0;
  while (true) {
    size_t e = mod.find('/', b);
    std::string_view comp = mod.substr(b, e == std::string_view::npos ? e : e - b);
    if (!isModulePath(comp))
      return {};
    if (!path.empty())
      path += '.';
    path += comp;
    if (e == std::string_view::npos)
      break;
    b = e + 1;
  }
  return path;
}

// Which attribute of the module an initializer is, from how it is consumed.
const char *suffixFor(std::string_view op, int input, size_t ndim) {
  if (op == "Gemm" || op == "Conv" || op == "ConvTranspose" || op == "LayerNormalization" ||
      op == "BatchNormalization" || op == "InstanceNormalization" ||
      op == "GroupNormalization") {
    if (input == 1)
      return "weight";
    if (input == 2)
      return "bias";
  }
  if (op == "MatMul" && input == 1)
    return "weight";
  if (op == "Gather" && input == 0)
    return "weight"; // nn.Embedding
  if (op == "Mul" && ndim == 1)
    return "weight"; // a norm's scale written as Mul
  if (op == "Add" && ndim == 1)
    return "bias";
  if (ndim >= 2)
    return "weight";
  if (ndim == 1)
    return "bias";
  return nullptr;
}

struct Use {
  const OnnxNode *node = nullptr;
  int input = -1;
};

class OnnxFrontend {
public:
  OnnxFrontend(const std::string &path, PlanModel &model, Diagnostics &diags)
      : path_(path), model_(model), diags_(diags) {}
  bool run();
  // The model's serialized bytes, already in memory.
  bool runOnBytes(std::string_view bytes);

private:
  void findUses();

  const std::string &path_;
  PlanModel &model_;
  Diagnostics &diags_;

  OnnxModelView view_;
  std::vector<const OnnxInitializer *> inits_; // floating-point initializers
  // Initializer names (views into the file) -> index: one flat table, not
  // a node per initializer.
  llvm::DenseMap<llvm::StringRef, int> index_;
  std::vector<Use> firstUse_;
  std::vector<bool> conv_;
  std::vector<int> order_;
};

// The nodes are in the order of a recursive walk of the graph: control-flow
// bodies (If/Loop/Scan), which may use outer initializers, right after
// their node.
void OnnxFrontend::findUses() {
  for (const OnnxNode &node : view_.graph.nodes) {
    llvm::ArrayRef<std::string_view> inputs = view_.graph.inputsOf(node);
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto it = index_.find(llvm::StringRef(inputs[i].data(), inputs[i].size()));
      if (it == index_.end())
        continue;
      int k = it->second;
      if (!firstUse_[k].node) {
        firstUse_[k] = Use{&node, static_cast<int>(i)};
        order_.push_back(k);
      }
      if (node.opType == "Conv" && i == 1 && inits_[k]->numDims >= 3)
        conv_[k] = true;
    }
  }
}

bool OnnxFrontend::run() {
  llvm::sys::fs::file_status st;
  if (std::error_code ec = llvm::sys::fs::status(path_, st)) {
    diags_.fileError(path_, ec == std::errc::no_such_file_or_directory
                                ? std::string("No such file or directory")
                                : ec.message());
    return false;
  }
  if (st.type() == llvm::sys::fs::file_type::directory_file) {
    diags_.fileError(path_, "Is a directory");
    return false;
  }
  if (st.getSize() > static_cast<uint64_t>(INT_MAX)) {
    diags_.fileError(path_, "the ONNX file is larger than 2 GiB, which protobuf cannot "
                            "parse; save the weights as external data "
                            "(onnx.save_model(..., save_as_external_data=True))");
    return false;
  }
  std::unique_ptr<llvm::MemoryBuffer> buf =
      readInputFile(path_, diags_, kMaxOnnxBytes, "an ONNX model");
  if (!buf)
    return false;
  return runOnBytes(std::string_view(buf->getBufferStart(), buf->getBufferSize()));
}

bool OnnxFrontend::runOnBytes(std::string_view bytes) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    diags_.fileError(path_, "the ONNX file is larger than 2 GiB, which protobuf cannot parse");
    return false;
  }

  // Only the fields the frontend reads are decoded (OnnxWire.h): a full
  // protobuf parse of a large export's initializers and nodes costs most of
  // dmuonc's time (docs/benchmarks.md, "dmuonc on the largest inputs").
  if (!decodeOnnxModel(bytes, view_)) {
    diags_.fileError(path_, "not a valid ONNX model (protobuf parse failed)");
    return false;
  }
  if (!view_.hasGraph) {
    diags_.fileError(path_, "not a valid ONNX model (it has no graph)");
    return false;
  }

  // Floating-point initializers are the params; integer ones (shape constants)
  // and scalars (folded constants such as epsilons) are not.
  index_.reserve(view_.initializers.size());
  inits_.reserve(view_.initializers.size());
  for (const OnnxInitializer &t : view_.initializers) {
    if (!dtypeOf(t.dataType) || t.numDims == 0)
      continue;
    if (t.name.empty()) {
      diags_.warning("'" + path_ + "': ignoring an initializer without a name");
      continue;
    }
    auto [it, inserted] = index_.try_emplace(llvm::StringRef(t.name.data(), t.name.size()),
                                             static_cast<int>(inits_.size()));
    (void)it;
    if (!inserted) {
      diags_.warning("'" + path_ + "': ignoring a second initializer named '" +
                     std::string(t.name) + "'");
      continue;
    }
    inits_.push_back(&t);
  }
  if (inits_.empty()) {
    diags_.fileError(path_, "the ONNX model has no floating-point initializers, so there "
                            "are no params (export it with its parameters, e.g. "
                            "torch.onnx.export(..., export_params=True))");
    return false;
  }
  firstUse_.assign(inits_.size(), Use{});
  conv_.assign(inits_.size(), false);
  order_.reserve(inits_.size());
  findUses();
  {
    std::vector<bool> placed(inits_.size(), false);
    for (int k : order_)
      placed[k] = true;
    for (size_t k = 0; k < inits_.size(); ++k)
      if (!placed[k])
        order_.push_back(static_cast<int>(k));
  }

  // Names: every initializer's own name (index_) is taken; a recovered name
  // must not collide with any of them or with an earlier recovered one.
  std::unordered_set<std::string> recovered;

  model_.modelName = view_.graphName.empty() ? llvm::sys::path::stem(path_).str()
                                             : std::string(view_.graphName);
  model_.params.reserve(model_.params.size() + order_.size());
  bool ok = true;
  for (int k : order_) {
    const OnnxInitializer &t = *inits_[k];
    Param &p = model_.params.emplace_back();
    p.name = std::string(t.name);
    p.dtype = *dtypeOf(t.dataType);
    llvm::ArrayRef<int64_t> dims = view_.dimsOf(t);
    p.shape.assign(dims.begin(), dims.end());
    for (int64_t d : p.shape)
      if (d < 0) {
        diags_.fileError(path_, "initializer '" + p.name + "' has a negative dim");
        ok = false;
        break;
      }
    p.placements.assign(model_.mesh.dims.size(), Placement{});
    p.conv = conv_[k];
    const Use &use = firstUse_[k];
    if (!isModulePath(t.name) && use.node) {
      std::string mod = modulePathOfNode(use.node->name);
      const char *suffix =
          mod.empty() ? nullptr : suffixFor(use.node->opType, use.input, p.shape.size());
      if (suffix) {
        std::string candidate = mod + "." + suffix;
        if (!index_.count(candidate) && recovered.insert(candidate).second) {
          p.recovered = std::make_shared<const RecoveredName>(RecoveredName{
              std::move(p.name), "recovered from node '" + std::string(use.node->name) + "'"});
          p.name = std::move(candidate);
        }
      }
    }
    if (std::string why = common::paramNameProblem(p.name); !why.empty()) {
      diags_.fileError(path_, "initializer name '" + common::printableName(p.name) + "' " + why +
                                  "; " + common::paramNameRuleText());
      ok = false;
    }
  }
  return ok;
}

} // namespace

namespace {

bool loadOnnx(const std::string &path, const std::string_view *bytes, PlanModel &model,
              Diagnostics &diags) {
  try {
    OnnxFrontend fe(path, model, diags);
    return bytes ? fe.runOnBytes(*bytes) : fe.run();
  } catch (const std::bad_alloc &) {
    diags.fileError(path, "out of memory while reading the ONNX model");
  } catch (const std::exception &e) {
    diags.fileError(path, e.what());
  }
  return false;
}

} // namespace

bool loadOnnxModel(const std::string &path, PlanModel &model, Diagnostics &diags) {
  return loadOnnx(path, nullptr, model, diags);
}

bool loadOnnxModelFromBuffer(std::string_view bytes, const std::string &name,
                             PlanModel &model, Diagnostics &diags) {
  return loadOnnx(name, &bytes, model, diags);
}

} // namespace dmuon
