// The ONNX frontend's wire-format decoder (compiler/frontend/OnnxWire.cpp)
// against protobuf's own parser of onnx.proto: on models built with the
// generated classes it reads what protobuf reads, and on corrupted bytes it
// never refuses what protobuf accepts nor reads anything protobuf would not.
#include "frontend/OnnxWire.h"

#include <onnx/onnx_pb.h>

#include "gtest/gtest.h"

#include <random>
#include <string>
#include <vector>

namespace dmuon {
namespace {

onnx::TensorProto *addInit(onnx::GraphProto &g, const std::string &name,
                           std::vector<int64_t> dims, int type) {
  onnx::TensorProto *t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims)
    t->add_dims(d);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  onnx::StringStringEntryProto *e = t->add_external_data();
  e->set_key("location");
  e->set_value("weights.bin");
  return t;
}

onnx::NodeProto *addNode(onnx::GraphProto &g, const std::string &op,
                         std::vector<std::string> inputs, const std::string &name) {
  onnx::NodeProto *n = g.add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const std::string &i : inputs)
    n->add_input(i);
  n->add_output(name + "_out");
  return n;
}

onnx::ModelProto sampleModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("OnnxWireTest");
  onnx::GraphProto &g = *m.mutable_graph();
  g.set_name("sample");
  addInit(g, "onnx::MatMul_1", {16, 8}, onnx::TensorProto::FLOAT);
  addInit(g, "norm.weight", {8}, onnx::TensorProto::BFLOAT16);
  addInit(g, "shape", {2}, onnx::TensorProto::INT64);
  addInit(g, "inner.weight", {4, 4, 3, 3}, onnx::TensorProto::FLOAT16);
  addNode(g, "MatMul", {"x", "onnx::MatMul_1"}, "/blocks.0/proj/MatMul");
  onnx::NodeProto *cond = addNode(g, "If", {"c"}, "/branch/If");
  onnx::AttributeProto *then = cond->add_attribute();
  then->set_name("then_branch");
  then->set_type(onnx::AttributeProto::GRAPH);
  addNode(*then->mutable_g(), "Conv", {"x", "inner.weight"}, "/inner/Conv");
  onnx::AttributeProto *bodies = cond->add_attribute();
  bodies->set_name("bodies");
  bodies->set_type(onnx::AttributeProto::GRAPHS);
  addNode(*bodies->add_graphs(), "Mul", {"y", "norm.weight"}, "/norm/Mul");
  addNode(g, "Add", {"y", "norm.weight"}, "/norm/Add");
  return m;
}

// The protobuf-parsed model in the decoder's terms: nodes in a recursive
// walk's order (a node, then its attributes' `g`, then their `graphs`).
void walk(const onnx::GraphProto &g, std::vector<std::string> &out) {
  for (const onnx::NodeProto &n : g.node()) {
    std::string s = n.name() + "|" + n.op_type();
    for (const std::string &i : n.input())
      s += "|" + i;
    out.push_back(s);
    for (const onnx::AttributeProto &a : n.attribute()) {
      if (a.has_g())
        walk(a.g(), out);
      for (const onnx::GraphProto &sub : a.graphs())
        walk(sub, out);
    }
  }
}

std::vector<std::string> describe(const onnx::ModelProto &m) {
  std::vector<std::string> out{"graph:" + std::to_string(m.has_graph()) + ":" +
                               m.graph().name()};
  for (const onnx::TensorProto &t : m.graph().initializer()) {
    std::string s = "init:" + t.name() + ":" + std::to_string(t.data_type());
    for (int64_t d : t.dims())
      s += ":" + std::to_string(d);
    out.push_back(s);
  }
  walk(m.graph(), out);
  return out;
}

std::vector<std::string> describe(const OnnxModelView &v) {
  std::vector<std::string> out{"graph:" + std::to_string(v.hasGraph) + ":" +
                               std::string(v.graphName)};
  for (const OnnxInitializer &t : v.initializers) {
    std::string s = "init:" + std::string(t.name) + ":" + std::to_string(t.dataType);
    for (int64_t d : v.dimsOf(t))
      s += ":" + std::to_string(d);
    out.push_back(s);
  }
  for (const OnnxNode &n : v.graph.nodes) {
    std::string s = std::string(n.name) + "|" + std::string(n.opType);
    for (std::string_view i : v.graph.inputsOf(n))
      s += "|" + std::string(i);
    out.push_back(s);
  }
  return out;
}

TEST(OnnxWire, ReadsWhatProtobufReads) {
  const std::string bytes = sampleModel().SerializeAsString();
  onnx::ModelProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  OnnxModelView view;
  ASSERT_TRUE(decodeOnnxModel(bytes, view));
  EXPECT_EQ(describe(view), describe(parsed));
  EXPECT_EQ(view.graph.nodes.size(), 5u); // MatMul, If, Conv (then), Mul (bodies), Add
}

TEST(OnnxWire, CorruptBytesAgreeWithProtobuf) {
  const std::string good = sampleModel().SerializeAsString();
  std::mt19937 rng(12345);
  int bothRead = 0, bothRefused = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string b = good;
    switch (iter % 4) {
    case 0: // flip a byte
      b[rng() % b.size()] = static_cast<char>(rng());
      break;
    case 1: // truncate
      b.resize(rng() % b.size());
      break;
    case 2: // flip a few bytes near the start (tags and lengths)
      for (int k = 0; k < 3; ++k)
        b[rng() % std::min<size_t>(b.size(), 64)] ^= static_cast<char>(1u << (rng() % 8));
      break;
    default: // insert random bytes
      b.insert(rng() % b.size(), std::string(1 + rng() % 4, static_cast<char>(rng())));
      break;
    }
    onnx::ModelProto parsed;
    const bool protobufOk = parsed.ParseFromString(b);
    OnnxModelView view;
    const bool ok = decodeOnnxModel(b, view);
    // Never refuses what protobuf accepts; fields it skips unread (external
    // data, attribute values) may hold what protobuf would refuse.
    if (protobufOk) {
      ASSERT_TRUE(ok) << "iteration " << iter;
      ASSERT_EQ(describe(view), describe(parsed)) << "iteration " << iter;
      ++bothRead;
    } else if (!ok) {
      ++bothRefused;
    }
  }
  EXPECT_GT(bothRead, 100);
  EXPECT_GT(bothRefused, 100);
}

} // namespace
} // namespace dmuon
