// A decoder of the few ONNX fields the frontend reads, straight from the
// protobuf wire format: the main graph's name, its initializers' names, data
// types and dims, and every node's name, op type, inputs, outputs and integer
// attributes, subgraphs
// (If/Loop/Scan bodies) included. Everything else (tensor data, external
// data entries, value infos, attribute values) is skipped as bytes, and the
// strings are views into the input, so reading a large export allocates
// little (docs/manifest-format.md, "ONNX").
#pragma once

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace dmuon {

// Dims and inputs live in one array each (OnnxModelView), not one per
// tensor or node.
struct OnnxInitializer {
  std::string_view name;
  int32_t dataType = 0; // TensorProto.DataType
  uint32_t dimsBegin = 0, numDims = 0;
  std::string_view encoded; // the whole TensorProto, as the file holds it
};

// An integer attribute (AttributeProto.i): what tells a Gemm's transB or a
// BatchNormalization's training_mode; other attribute values are skipped.
struct OnnxIntAttribute {
  std::string_view name;
  int64_t value = 0;
};

struct OnnxNode {
  std::string_view name;
  std::string_view opType;
  uint32_t inputsBegin = 0, numInputs = 0;
  uint32_t outputsBegin = 0, numOutputs = 0;
  uint32_t attrsBegin = 0, numAttrs = 0;
};

struct OnnxNodeList {
  std::vector<OnnxNode> nodes;
  std::vector<std::string_view> inputs;
  std::vector<std::string_view> outputs;
  std::vector<OnnxIntAttribute> attrs;
  llvm::ArrayRef<std::string_view> inputsOf(const OnnxNode &n) const {
    return llvm::ArrayRef(inputs).slice(n.inputsBegin, n.numInputs);
  }
  llvm::ArrayRef<std::string_view> outputsOf(const OnnxNode &n) const {
    return llvm::ArrayRef(outputs).slice(n.outputsBegin, n.numOutputs);
  }
  // The value of integer attribute `name`, or `otherwise`.
  int64_t intAttribute(const OnnxNode &n, std::string_view name, int64_t otherwise) const {
    for (const OnnxIntAttribute &a : llvm::ArrayRef(attrs).slice(n.attrsBegin, n.numAttrs))
      if (a.name == name)
        return a.value;
    return otherwise;
  }
};

struct OnnxModelView {
  bool hasGraph = false;
  std::string_view graphName;
  // The main graph's initializers (a subgraph's are not params).
  std::vector<OnnxInitializer> initializers;
  std::vector<int64_t> dims;
  // Every node of the main graph, each followed by the nodes of its
  // attributes' subgraphs (in attribute order; `g` before `graphs`), so a
  // walk in this order meets uses as a recursive walk of the graph does.
  OnnxNodeList graph;

  llvm::ArrayRef<int64_t> dimsOf(const OnnxInitializer &t) const {
    return llvm::ArrayRef(dims).slice(t.dimsBegin, t.numDims);
  }
};

// Decodes a serialized onnx.ModelProto. False if the bytes are not a valid
// protobuf message (a bad tag or length, truncated input, nesting deeper than
// protobuf's default limit of 100); protobuf's merge rules hold (a repeated
// singular message field merges, a repeated scalar field keeps the last).
bool decodeOnnxModel(std::string_view bytes, OnnxModelView &out);

} // namespace dmuon
