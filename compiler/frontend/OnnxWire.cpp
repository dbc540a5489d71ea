// Protobuf wire format: a message is a sequence of (tag, value); the tag is a
// varint field_number << 3 | wire_type. Fields this decoder does not read,
// and read fields that arrive with another wire type (protobuf treats those
// as unknown too), are skipped.
#include "OnnxWire.h"

namespace dmuon {

namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kStartGroup = 3,
                           kEndGroup = 4, kFixed32 = 5 };

// onnx.proto's field numbers.
namespace field {
constexpr uint32_t kModelGraph = 7;
constexpr uint32_t kGraphNode = 1, kGraphName = 2, kGraphInitializer = 5;
constexpr uint32_t kNodeInput = 1, kNodeOutput = 2, kNodeName = 3, kNodeOpType = 4,
                   kNodeAttribute = 5;
constexpr uint32_t kAttributeName = 1, kAttributeInt = 3, kAttributeGraph = 6,
                   kAttributeGraphs = 11;
constexpr uint32_t kTensorDims = 1, kTensorDataType = 2, kTensorName = 8;
} // namespace field

// protobuf's default recursion limit for nested messages and groups.
constexpr int kMaxDepth = 100;

class Reader {
public:
  explicit Reader(std::string_view bytes)
      : p_(reinterpret_cast<const uint8_t *>(bytes.data())), end_(p_ + bytes.size()) {}

  bool atEnd() const { return p_ == end_; }

  bool varint(uint64_t &v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_)
        return false;
      uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80))
        return true;
    }
    return false; // more than 10 bytes
  }

  bool tag(uint32_t &number, uint32_t &type) {
    uint64_t t;
    if (!varint(t) || t > UINT32_MAX)
      return false;
    number = static_cast<uint32_t>(t >> 3);
    type = static_cast<uint32_t>(t & 7);
    return number != 0;
  }

  bool bytes(std::string_view &s) {
    uint64_t n;
    if (!varint(n) || n > static_cast<uint64_t>(end_ - p_))
      return false;
    s = std::string_view(reinterpret_cast<const char *>(p_), static_cast<size_t>(n));
    p_ += n;
    return true;
  }

  bool advance(size_t n) {
    if (n > static_cast<size_t>(end_ - p_))
      return false;
    p_ += n;
    return true;
  }

  // Skips the value of a field whose tag was just read.
  bool skip(uint32_t number, uint32_t type, int depth) {
    uint64_t v;
    std::string_view s;
    switch (type) {
    case kVarint:
      return varint(v);
    case kFixed64:
      return advance(8);
    case kBytes:
      return bytes(s);
    case kFixed32:
      return advance(4);
    case kStartGroup: {
      if (depth >= kMaxDepth)
        return false;
      uint32_t n, t;
      while (tag(n, t)) {
        if (t == kEndGroup)
          return n == number;
        if (!skip(n, t, depth + 1))
          return false;
      }
      return false;
    }
    default: // an end group without its start, or wire types 6 and 7
      return false;
    }
  }

private:
  const uint8_t *p_;
  const uint8_t *end_;
};

// Reads every (tag, value) of a message, handing each tag to `onField`,
// which consumes the value and returns true, or returns false to skip it
// (fields the decoder does not read). False on malformed input.
template <typename OnField>
bool forEachField(std::string_view msg, int depth, bool &ok, OnField onField) {
  if (depth > kMaxDepth)
    return false;
  Reader r(msg);
  while (!r.atEnd()) {
    uint32_t number, type;
    if (!r.tag(number, type))
      return false;
    bool handled = onField(r, number, type);
    if (!ok)
      return false;
    if (!handled && !r.skip(number, type, depth))
      return false;
  }
  return true;
}

// `dims` receives the tensor's dims; t.dimsBegin must be dims.size() on entry.
bool decodeTensor(std::string_view msg, int depth, OnnxInitializer &t,
                  std::vector<int64_t> &dims) {
  bool ok = true;
  bool decoded = forEachField(msg, depth, ok, [&](Reader &r, uint32_t number, uint32_t type) {
    uint64_t v;
    if (number == field::kTensorDims && type == kVarint) {
      ok = r.varint(v);
      dims.push_back(static_cast<int64_t>(v));
    } else if (number == field::kTensorDims && type == kBytes) { // packed
      std::string_view packed;
      ok = r.bytes(packed);
      Reader p(packed);
      while (ok && !p.atEnd()) {
        ok = p.varint(v);
        dims.push_back(static_cast<int64_t>(v));
      }
    } else if (number == field::kTensorDataType && type == kVarint) {
      ok = r.varint(v);
      t.dataType = static_cast<int32_t>(v);
    } else if (number == field::kTensorName && type == kBytes) {
      ok = r.bytes(t.name);
    } else {
      return false;
    }
    return true;
  });
  t.numDims = static_cast<uint32_t>(dims.size() - t.dimsBegin);
  return decoded;
}

// How many nodes and initializers a graph message lists, to reserve room.
void countGraphFields(std::string_view msg, size_t &nodes, size_t &inits) {
  Reader r(msg);
  uint32_t number, type;
  std::string_view s;
  while (!r.atEnd() && r.tag(number, type) && type == kBytes && r.bytes(s)) {
    nodes += number == field::kGraphNode;
    inits += number == field::kGraphInitializer;
  }
}

void append(OnnxNodeList &to, const OnnxNodeList &from) {
  const auto base = static_cast<uint32_t>(to.inputs.size());
  const auto outBase = static_cast<uint32_t>(to.outputs.size());
  const auto attrBase = static_cast<uint32_t>(to.attrs.size());
  to.inputs.insert(to.inputs.end(), from.inputs.begin(), from.inputs.end());
  to.outputs.insert(to.outputs.end(), from.outputs.begin(), from.outputs.end());
  to.attrs.insert(to.attrs.end(), from.attrs.begin(), from.attrs.end());
  for (OnnxNode n : from.nodes) {
    n.inputsBegin += base;
    n.outputsBegin += outBase;
    n.attrsBegin += attrBase;
    to.nodes.push_back(n);
  }
}

bool decodeGraph(std::string_view msg, int depth, OnnxNodeList &nodes, OnnxModelView *top);

// `intAttr` receives the attribute's name and integer value (0 if it has none).
bool decodeAttribute(std::string_view msg, int depth, OnnxNodeList &nodes,
                     OnnxIntAttribute &intAttr) {
  // `g` (merged if repeated) is walked before `graphs`, whatever the order
  // on the wire.
  OnnxNodeList gNodes, graphsNodes;
  bool ok = true;
  bool decoded = forEachField(msg, depth, ok, [&](Reader &r, uint32_t number, uint32_t type) {
    if (number == field::kAttributeName && type == kBytes) {
      ok = r.bytes(intAttr.name);
      return true;
    }
    if (number == field::kAttributeInt && type == kVarint) {
      uint64_t v;
      ok = r.varint(v);
      intAttr.value = static_cast<int64_t>(v);
      return true;
    }
    if (type != kBytes || (number != field::kAttributeGraph && number != field::kAttributeGraphs))
      return false;
    std::string_view sub;
    ok = r.bytes(sub) &&
         decodeGraph(sub, depth + 1, number == field::kAttributeGraph ? gNodes : graphsNodes,
                     nullptr);
    return true;
  });
  if (!decoded)
    return false;
  append(nodes, gNodes);
  append(nodes, graphsNodes);
  return true;
}

bool decodeNode(std::string_view msg, int depth, OnnxNodeList &nodes) {
  const size_t self = nodes.nodes.size();
  nodes.nodes.emplace_back();
  // Inputs are collected first: a subgraph's nodes follow this one, and
  // their inputs must not interleave with this node's.
  const size_t inputsBegin = nodes.inputs.size();
  const size_t outputsBegin = nodes.outputs.size();
  const size_t attrsBegin = nodes.attrs.size();
  OnnxNodeList attrNodes;
  bool ok = true;
  bool decoded = forEachField(msg, depth, ok, [&](Reader &r, uint32_t number, uint32_t type) {
    if (type != kBytes)
      return false;
    std::string_view s;
    switch (number) {
    case field::kNodeInput:
      ok = r.bytes(s);
      nodes.inputs.push_back(s);
      return true;
    case field::kNodeOutput:
      ok = r.bytes(s);
      nodes.outputs.push_back(s);
      return true;
    case field::kNodeName:
      ok = r.bytes(nodes.nodes[self].name);
      return true;
    case field::kNodeOpType:
      ok = r.bytes(nodes.nodes[self].opType);
      return true;
    case field::kNodeAttribute: {
      OnnxIntAttribute a;
      ok = r.bytes(s) && decodeAttribute(s, depth + 1, attrNodes, a);
      nodes.attrs.push_back(a);
      return true;
    }
    default:
      return false;
    }
  });
  nodes.nodes[self].inputsBegin = static_cast<uint32_t>(inputsBegin);
  nodes.nodes[self].numInputs = static_cast<uint32_t>(nodes.inputs.size() - inputsBegin);
  nodes.nodes[self].outputsBegin = static_cast<uint32_t>(outputsBegin);
  nodes.nodes[self].numOutputs = static_cast<uint32_t>(nodes.outputs.size() - outputsBegin);
  nodes.nodes[self].attrsBegin = static_cast<uint32_t>(attrsBegin);
  nodes.nodes[self].numAttrs = static_cast<uint32_t>(nodes.attrs.size() - attrsBegin);
  append(nodes, attrNodes);
  return decoded;
}

// `top`: the main graph, whose name and initializers are read; a subgraph's
// initializers are only checked to be messages.
bool decodeGraph(std::string_view msg, int depth, OnnxNodeList &nodes, OnnxModelView *top) {
  if (top) {
    size_t numNodes = 0, numInits = 0;
    countGraphFields(msg, numNodes, numInits);
    nodes.nodes.reserve(nodes.nodes.size() + numNodes);
    nodes.inputs.reserve(nodes.inputs.size() + 2 * numNodes);
    top->initializers.reserve(top->initializers.size() + numInits);
    top->dims.reserve(top->dims.size() + 2 * numInits);
  }
  std::vector<int64_t> unusedDims;
  bool ok = true;
  return forEachField(msg, depth, ok, [&](Reader &r, uint32_t number, uint32_t type) {
    if (type != kBytes)
      return false;
    std::string_view s;
    switch (number) {
    case field::kGraphNode:
      ok = r.bytes(s) && decodeNode(s, depth + 1, nodes);
      return true;
    case field::kGraphName:
      ok = r.bytes(s);
      if (top)
        top->graphName = s;
      return true;
    case field::kGraphInitializer:
      ok = r.bytes(s);
      if (ok && top) {
        OnnxInitializer t;
        t.dimsBegin = static_cast<uint32_t>(top->dims.size());
        t.encoded = s;
        ok = decodeTensor(s, depth + 1, t, top->dims);
        top->initializers.push_back(t);
      } else if (ok) {
        OnnxInitializer t;
        unusedDims.clear();
        ok = decodeTensor(s, depth + 1, t, unusedDims);
      }
      return true;
    default:
      return false;
    }
  });
}

} // namespace

bool decodeOnnxModel(std::string_view bytes, OnnxModelView &out) {
  out = OnnxModelView();
  bool ok = true;
  return forEachField(bytes, 0, ok, [&](Reader &r, uint32_t number, uint32_t type) {
    if (number != field::kModelGraph || type != kBytes)
      return false;
    std::string_view g;
    out.hasGraph = true;
    ok = r.bytes(g) && decodeGraph(g, 1, out.graph, &out);
    return true;
  });
}

} // namespace dmuon
