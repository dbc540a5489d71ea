// The ONNX frontend: params are the graph's floating-point initializers. Only
// names, dims and data types are read; tensor data (raw_data or external data
// files) is never touched, so models whose external data is absent work.
//
// Exporters rename weights after constant folding (`onnx::MatMul_507`); the
// torch name and orientation are recovered where the graph proves them
// (OnnxNames.cpp), and every initializer that cannot be named is reported,
// an error under --strict-names. Buffers (BatchNorm running statistics,
// masks no gradient reaches) are not planned; a note lists them
// (docs/exporting-from-pytorch.md).
#include "Frontend.h"
#include "OnnxNames.h"
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

using Use = OnnxUse;

// What the frontend set apart or could not name, for its diagnostics.
struct NameReport {
  std::vector<std::pair<std::string, std::string>> buffers;     // name, why
  std::vector<std::pair<std::string, std::string>> unrecovered; // name and shape, why
  std::vector<std::string> bnFolded;                            // conv modules
  int renamed = 0, recovered = 0;
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
  bool report(const NameReport &r);

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
    if (!inserted) {
      // Byte-identical copies (an exporter writing a shared tensor twice)
      // are one param; two different tensors under one name would leave the
      // plan's shape or values to whichever was read first.
      if (inits_[it->second]->encoded != t.encoded) {
        diags_.fileError(path_, "two different initializers are named '" +
                                    common::printableName(t.name) +
                                    "' (their dims, dtype or data differ); a name must "
                                    "identify one tensor");
        return false;
      }
      diags_.warning("'" + path_ + "': ignoring a second, identical initializer named '" +
                     common::printableName(t.name) + "'");
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

  model_.modelName = view_.graphName.empty() ? llvm::sys::path::stem(path_).str()
                                             : std::string(view_.graphName);
  if (std::string why = common::paramNameProblem(model_.modelName); !why.empty()) {
    diags_.fileError(path_, "the graph's name '" + common::printableName(model_.modelName) +
                                "' " + why + "; a model name follows the param names' rule (" +
                                common::paramNameRuleText() + ")");
    return false;
  }
  if (static_cast<int64_t>(order_.size()) > kMaxModelParams) {
    diags_.fileError(path_, "the model has " + std::to_string(order_.size()) +
                                " initializers, more than the " + std::to_string(kMaxModelParams) +
                                " params dmuonc accepts");
    return false;
  }
  model_.params.reserve(model_.params.size() + order_.size());
  OnnxNameResolver resolver(view_, index_, inits_);
  NameReport names;
  bool ok = true;
  for (int k : order_) {
    const OnnxInitializer &t = *inits_[k];
    // Every initializer's own name, also one that is renamed (the plan keeps
    // it as the param's source name) or a buffer's.
    if (std::string why = common::paramNameProblem(t.name); !why.empty()) {
      diags_.fileError(path_, "initializer name '" + common::printableName(t.name) + "' " + why +
                                  "; " + common::paramNameRuleText());
      ok = false;
      continue;
    }
    llvm::ArrayRef<int64_t> dims = view_.dimsOf(t);
    std::vector<int64_t> shape(dims.begin(), dims.end());
    OnnxResolution r = resolver.resolve(k, firstUse_[k]);
    // The reasons quote the graph's node names and op types as given.
    r.why = common::escapedText(r.why);
    if (r.kind == OnnxResolution::buffer) {
      names.buffers.emplace_back(std::string(t.name), r.why);
      model_.buffers.push_back({std::string(t.name), std::move(shape), r.why});
      continue;
    }
    Param &p = model_.params.emplace_back();
    p.name = std::string(t.name);
    p.dtype = *dtypeOf(t.dataType);
    p.shape = std::move(shape);
    for (int64_t d : p.shape)
      if (d < 0) {
        diags_.fileError(path_, "initializer '" + p.name + "' has a negative dim");
        ok = false;
        break;
      }
    p.placements.assign(model_.mesh.dims.size(), Placement{});
    p.conv = conv_[k];
    names.renamed += r.kind == OnnxResolution::recovered || r.kind == OnnxResolution::unrecovered;
    if (r.kind == OnnxResolution::recovered) {
      ++names.recovered;
      p.recovered = std::make_shared<const RecoveredName>(RecoveredName{std::move(p.name), r.why});
      p.name = r.name;
      // A name made from a node's module path follows the same rule.
      if (std::string why = common::paramNameProblem(p.name); !why.empty()) {
        diags_.fileError(path_, "the name '" + common::printableName(p.name) +
                                    "' recovered for initializer '" + p.recovered->sourceName +
                                    "' " + why + "; " + common::paramNameRuleText());
        ok = false;
      }
      if (r.transpose)
        std::swap(p.shape[p.shape.size() - 2], p.shape.back());
      if (r.bnFolded)
        names.bnFolded.push_back(p.name.substr(0, p.name.rfind('.')));
    } else if (r.kind == OnnxResolution::unrecovered) {
      names.unrecovered.emplace_back("'" + p.name + "' " + shapeString(p.shape), r.why);
    }
  }
  return report(names) && ok;
}

// Buffers get a note; names that cannot be given to torch's parameters a
// warning each, and a folded export a warning that says how to export
// instead: all errors under --strict-names (docs/exporting-from-pytorch.md).
bool OnnxFrontend::report(const NameReport &r) {
  if (!r.buffers.empty()) {
    std::string list;
    for (const auto &[name, why] : r.buffers)
      list += "\n  " + name + ": " + why;
    diags_.note(llvm::SMLoc(), "'" + path_ + "': " + std::to_string(r.buffers.size()) +
                                   " initializers are buffers, not parameters, and are not "
                                   "planned (no optimizer, route or memory):" + list);
  }
  const bool strict = model_.options.strictNames;
  auto say = [&](const std::string &msg) {
    if (strict)
      diags_.fileError(path_, msg);
    else
      diags_.warning("'" + path_ + "': " + msg);
  };
  for (const auto &[what, why] : r.unrecovered)
    say("initializer " + what + " has no torch parameter name and none can be recovered (" +
        why + ")" + (strict ? "" : "; it is planned under this name"));
  if (!r.bnFolded.empty()) {
    std::string list;
    for (size_t i = 0; i < r.bnFolded.size() && i < 8; ++i)
      list += (i ? ", " : "") + r.bnFolded[i];
    if (r.bnFolded.size() > 8)
      list += ", ...";
    say(std::to_string(r.bnFolded.size()) + " BatchNorms were folded into convolutions (" + list +
        "): their weights and biases are not in the model");
  }
  if (r.renamed > 0)
    say("the export was constant-folded: " + std::to_string(r.renamed) +
        " initializers have names the exporter made (" + std::to_string(r.recovered) +
        " recovered); folding also merges identical tensors and removes parameters, so the "
        "plan may not list every torch parameter. Export with torch.onnx.export(..., "
        "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False) to keep every "
        "parameter as an initializer under its own name");
  return !strict || (r.unrecovered.empty() && r.bnFolded.empty() && r.renamed == 0);
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
