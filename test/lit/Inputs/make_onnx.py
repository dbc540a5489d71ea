#!/usr/bin/env python3
"""Writes small ONNX models for the frontend lit tests.

Usage: make_onnx.py KIND OUT.onnx

KIND:
  folded    a PyTorch-style export after constant folding: MatMul weights are
            renamed `onnx::MatMul_5xx`, biases and norms keep their module
            names, plus an embedding (Gather), a Conv weight, a bf16 weight, an
            int64 shape constant and a scalar epsilon (neither is a param).
  external  the same kind of model saved with external data
            (location="weights.bin"), after which weights.bin is deleted.
  unused    a model whose initializers are not all consumed, in an order
            different from the node order (checks model order).
  corrupt   bytes that are not a protobuf message.
  empty     a valid model with no floating-point initializers.
  subgraph  outer initializers used only inside an If node's bodies (a
            `graphs` attribute, then a `g` one), plus one used after the If
            in the main graph.
  wire      hand-encoded protobuf: packed dims, a graph sent in two parts
            (protobuf merges them), unknown fields including a group.
  deep      If nodes nested past protobuf's recursion limit of 100.
  truncated a valid model cut short in the middle of an initializer.
  torchfolded  what torch.onnx.export's default (eval, constant folding) writes:
            folded Linear / MultiheadAttention weights `onnx::MatMul_N` [in, out]
            with their named biases, a doubled scope path, Gemms with and
            without transB, a BatchNorm folded into a Conv, a folded constant,
            and a module with two MatMuls and no biases.
  buffers   a training-mode export's buffers: BatchNorm running statistics, a
            float causal mask used only through Slice/Equal/Where, and an int64
            counter (not floating point: never a param).
  toomany   2,000,001 initializers of shape [1] without data, hand-encoded:
            one more than the params dmuonc accepts (compiler/Model.h).
  badnames  initializers named with a newline, a tab, and 4097 bytes, and
            one good name (names must be 1 to 4096 bytes without control
            characters).
  sourcenames  hand-encoded: folded MatMul weights whose exporter names
            (each one renamed to its module's weight) hold a newline that
            would forge a plan line, an escape code, a NUL, invalid UTF-8
            and a C1 control; a BatchNorm running mean (a buffer) with a
            carriage return; one good weight.
  nodenames  hand-encoded: good initializer names, but node names and an op
            type with a newline, escape codes, a NUL and invalid UTF-8, quoted
            in the notes and warnings dmuonc prints.
  graphname  a graph named with a newline.
  dupsame   an initializer written twice, byte for byte the same.
  dupdims   two initializers of one name with different dims.
  dupdata   two initializers of one name, same dims, different data.

Only onnx.helper/numpy_helper are used, so Debian's python3-onnx (1.12) works.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def f32(name, shape):
    return numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name)


def bf16(name, shape):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.BFLOAT16
    t.dims.extend(shape)
    t.raw_data = bytes(2 * int(np.prod(shape)))
    return t


def folded_graph(name):
    nodes = [
        helper.make_node("Gather", ["embed.weight", "ids"], ["/embed/Gather_output_0"],
                         name="/embed/Gather"),
        helper.make_node("Conv", ["image", "conv.weight", "conv.bias"], ["/conv/Conv_output_0"],
                         name="/conv/Conv"),
    ]
    inits = [
        f32("embed.weight", [100, 16]),
        f32("conv.weight", [16, 3, 3, 3]),
        f32("conv.bias", [16]),
    ]
    x = "/embed/Gather_output_0"
    n = 507
    for layer in range(2):
        mod = f"layers.{layer}"
        for lin in ("linear1", "linear2"):
            w = f"onnx::MatMul_{n}"
            n += 1
            inits += [f32(w, [16, 16]), f32(f"{mod}.{lin}.bias", [16])]
            nodes += [
                helper.make_node("MatMul", [x, w], [f"/{mod}/{lin}/MatMul_output_0"],
                                 name=f"/{mod}/{lin}/MatMul"),
                helper.make_node("Add", [f"{mod}.{lin}.bias", f"/{mod}/{lin}/MatMul_output_0"],
                                 [f"/{mod}/{lin}/Add_output_0"], name=f"/{mod}/{lin}/Add"),
            ]
            x = f"/{mod}/{lin}/Add_output_0"
        inits += [f32(f"{mod}.norm.weight", [16]), f32(f"{mod}.norm.bias", [16])]
        nodes.append(helper.make_node(
            "LayerNormalization", [x, f"{mod}.norm.weight", f"{mod}.norm.bias"],
            [f"/{mod}/norm/LayerNormalization_output_0"],
            name=f"/{mod}/norm/LayerNormalization", axis=-1, epsilon=1e-5))
        x = f"/{mod}/norm/LayerNormalization_output_0"
    # A folded norm scale consumed by Mul: recovered as `final_norm.weight`.
    inits.append(f32("onnx::Mul_900", [16]))
    nodes.append(helper.make_node("Mul", [x, "onnx::Mul_900"], ["/final_norm/Mul_output_0"],
                                  name="/final_norm/Mul"))
    x = "/final_norm/Mul_output_0"
    # A bf16 head whose recovered name collides with an existing initializer
    # (`head.weight`), so it keeps its exporter name.
    inits.append(bf16("onnx::MatMul_901", [16, 100]))
    inits.append(f32("head.weight", [4, 4]))
    nodes.append(helper.make_node("MatMul", [x, "onnx::MatMul_901"], ["/head/MatMul_output_0"],
                                  name="/head/MatMul"))
    # Not params: an int64 shape constant and a scalar epsilon.
    inits.append(numpy_helper.from_array(np.array([1, 100], dtype=np.int64), "onnx::Reshape_950"))
    inits.append(numpy_helper.from_array(np.array(1e-5, dtype=np.float32), "onnx::Add_951"))
    nodes.append(helper.make_node("Reshape", ["/head/MatMul_output_0", "onnx::Reshape_950"],
                                  ["logits0"], name="/Reshape"))
    nodes.append(helper.make_node("Add", ["logits0", "onnx::Add_951"], ["logits"], name="/Add"))
    # head.weight stays unconsumed on purpose: it comes last in model order.
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8]),
         helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        initializer=inits)
    return graph


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, wire_type, payload):
    tag = varint(number << 3 | wire_type)
    if wire_type == 2:
        return tag + varint(len(payload)) + payload
    return tag + payload


def wire_model():
    """A ModelProto spelled byte by byte, with what onnx.helper never writes."""
    def tensor(name, dims, packed):
        dims_bytes = (field(1, 2, b"".join(varint(d) for d in dims)) if packed
                      else b"".join(field(1, 0, varint(d)) for d in dims))
        unknown_group = varint(100 << 3 | 3) + field(1, 0, varint(5)) + varint(100 << 3 | 4)
        return (field(8, 2, name.encode()) + unknown_group + dims_bytes +
                field(2, 0, varint(TensorProto.FLOAT)) + field(99, 5, b"\0\0\0\0"))

    def node(op, inputs, name):
        return (b"".join(field(1, 2, i.encode()) for i in inputs) + field(3, 2, name.encode()) +
                field(4, 2, op.encode()))

    part1 = (field(2, 2, b"first_name") +
             field(5, 2, tensor("onnx::MatMul_1", [8, 4], packed=True)) +
             field(1, 2, node("MatMul", ["x", "onnx::MatMul_1"], "/blocks.0/proj/MatMul")))
    part2 = (field(5, 2, tensor("b.bias", [4], packed=False)) +
             field(1, 2, node("Add", ["y", "b.bias"], "/b/Add")) +
             field(2, 2, b"wire_model") + field(77, 1, b"\0" * 8))
    return (field(1, 0, varint(8)) + field(7, 2, part1) + field(8, 2, field(2, 0, varint(17))) +
            field(7, 2, part2))


def too_many_model():
    """One initializer past kMaxModelParams, spelled on the wire (onnx.helper
    would take minutes for two million tensors)."""
    shape = field(1, 0, varint(1)) + field(2, 0, varint(TensorProto.FLOAT))
    graph = b"".join(field(5, 2, shape + field(8, 2, b"p%d" % k)) for k in range(2_000_001))
    return field(1, 0, varint(8)) + field(7, 2, field(2, 2, b"too_many") + graph)


def hand_model(graph_name, inits, nodes):
    """A ModelProto on the wire, names as raw bytes (onnx.helper refuses
    invalid UTF-8). inits: (name, dims); nodes: (op, inputs, name)."""
    def tensor(name, dims):
        return (b"".join(field(1, 0, varint(d)) for d in dims) +
                field(2, 0, varint(TensorProto.FLOAT)) + field(8, 2, name))

    def node(op, inputs, name):
        return b"".join(field(1, 2, i) for i in inputs) + field(3, 2, name) + field(4, 2, op)

    graph = (field(2, 2, graph_name) + b"".join(field(5, 2, tensor(*t)) for t in inits) +
             b"".join(field(1, 2, node(*n)) for n in nodes))
    return field(1, 0, varint(8)) + field(7, 2, graph)


def source_names_model():
    bad = [b"onnx::MatMul_1\nparam forged shape=[1]", b"onnx::MatMul_2\x1b[2J\x1b]0;t\x07",
           b"onnx::MatMul_3\x00x", b"onnx::MatMul_4\xff\xfe", b"onnx::MatMul_5\xc2\x85",
           b"onnx::MatMul_6"]
    inits = [(name, [8, 8]) for name in bad]
    nodes = [(b"MatMul", [b"x", name], b"/blocks.%d/proj/MatMul" % k) for k, name in enumerate(bad)]
    inits += [(b"bn.weight", [8]), (b"bn.bias", [8]), (b"bn.running_mean\r", [8]),
              (b"bn.running_var", [8])]
    nodes.append((b"BatchNormalization",
                  [b"c", b"bn.weight", b"bn.bias", b"bn.running_mean\r", b"bn.running_var"],
                  b"/bn/BatchNormalization"))
    return hand_model(b"source_names", inits, nodes)


def node_names_model():
    inits = [(b"onnx::MatMul_1", [8, 8]), (b"onnx::MatMul_2", [8, 8]),
             (b"onnx::MatMul_3", [8, 8]), (b"onnx::Add_4", [1, 8])]
    nodes = [
        (b"MatMul", [b"x", b"onnx::MatMul_1"], b"/blocks.0/proj/MatMul\nparam forged"),
        (b"MatMul", [b"x", b"onnx::MatMul_2"], b"/blocks.1/proj/MatMul\x1b[31m\x00\xff"),
        (b"MatMul", [b"x", b"onnx::MatMul_3"], b"/attn/MatMul"),
        (b"Add\x1b[2J", [b"h", b"onnx::Add_4"], b"/x/Add\r\xc0"),
    ]
    return hand_model(b"node_names", inits, nodes)


def make_model(graph):
    return helper.make_model(graph, producer_name="make_onnx.py",
                             opset_imports=[helper.make_opsetid("", 17)])


def graph_of(name, nodes, inits):
    return helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])], initializer=inits)


def torch_folded():
    mha = "enc.layers.enc_layer_0.self_attention"
    inits = [f32("onnx::MatMul_1", [8, 24]), f32(mha + ".in_proj_bias", [24]),
             f32("onnx::MatMul_2", [8, 16]), f32("onnx::Gemm_3", [8, 4]), f32("fc.bias", [4]),
             f32("onnx::Gemm_4", [4, 8]), f32("onnx::Conv_5", [8, 3, 3, 3]),
             f32("onnx::Conv_6", [8]), f32("onnx::Add_7", [1, 2, 4, 4]),
             f32("onnx::MatMul_8", [8, 8]), f32("onnx::MatMul_9", [8, 8])]
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "onnx::MatMul_1"], ["q"], name="/enc/layers/enc_layer_0/self_attention/MatMul"),
        n("Add", [mha + ".in_proj_bias", "q"], ["q2"], name="/enc/layers/enc_layer_0/self_attention/Add"),
        n("MatMul", ["x", "onnx::MatMul_2"], ["m"], name="/features/features.1/features.1.0/mlp/mlp.0/MatMul"),
        n("Gemm", ["x", "onnx::Gemm_3", "fc.bias"], ["g"], name="/fc/Gemm", transB=0),
        n("Gemm", ["x", "onnx::Gemm_4"], ["g2"], name="/fc2/Gemm", transB=1),
        n("Conv", ["img", "onnx::Conv_5", "onnx::Conv_6"], ["c"], name="/layer1/layer1.0/conv1/Conv"),
        n("Add", ["h", "onnx::Add_7"], ["a"], name="/features/features.1/features.1.0/attn/Add_1"),
        n("MatMul", ["x", "onnx::MatMul_8"], ["s1"], name="/attn/attn/MatMul"),
        n("MatMul", ["x", "onnx::MatMul_9"], ["s2"], name="/attn/attn/MatMul_1"),
    ]
    return graph_of("torch_folded", nodes, inits)


def train_buffers():
    inits = [f32("conv.weight", [8, 3, 3, 3]), f32("bn.weight", [8]), f32("bn.bias", [8]),
             f32("bn.running_mean", [8]), f32("bn.running_var", [8]),
             numpy_helper.from_array(np.zeros([], dtype=np.int64), "bn.num_batches_tracked"),
             f32("attn.bias", [1, 1, 4, 4]), f32("attn.proj.weight", [8, 8])]
    n = helper.make_node
    nodes = [
        n("Conv", ["img", "conv.weight"], ["c"], name="/conv/Conv"),
        n("BatchNormalization", ["c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
          ["b", "mean_out", "var_out"], name="/bn/BatchNormalization", training_mode=1),
        n("Slice", ["attn.bias", "starts", "ends"], ["mask"], name="/attn/Slice"),
        n("Equal", ["mask", "zero"], ["cond"], name="/attn/Equal"),
        n("Where", ["cond", "neg", "scores"], ["masked"], name="/attn/Where"),
        n("Transpose", ["attn.proj.weight"], ["wt"], name="/attn/proj/Transpose"),
        n("MatMul", ["masked", "wt"], ["y"], name="/attn/proj/MatMul"),
    ]
    return graph_of("train_buffers", nodes, inits)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "folded":
        onnx.save_model(make_model(folded_graph("folded_mlp")), out)
    elif kind == "torchfolded":
        onnx.save_model(make_model(torch_folded()), out)
    elif kind == "buffers":
        onnx.save_model(make_model(train_buffers()), out)
    elif kind == "external":
        model = make_model(folded_graph("external_mlp"))
        onnx.save_model(model, out, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="weights.bin", size_threshold=0)
        data = os.path.join(os.path.dirname(os.path.abspath(out)), "weights.bin")
        os.remove(data)
    elif kind == "unused":
        inits = [f32("b.weight", [4, 4]), f32("spare.weight", [2, 2]), f32("a.weight", [4, 4])]
        nodes = [
            helper.make_node("MatMul", ["x", "a.weight"], ["y"], name="/a/MatMul"),
            helper.make_node("MatMul", ["y", "b.weight"], ["z"], name="/b/MatMul"),
        ]
        graph = helper.make_graph(
            nodes, "", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])], initializer=inits)
        onnx.save_model(make_model(graph), out)
    elif kind == "corrupt":
        # Field number 0 is never valid in a protobuf tag.
        with open(out, "wb") as f:
            f.write(b"\x00\x07this is not an ONNX model\xff\xff\xff")
    elif kind == "empty":
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"], name="/Relu")], "empty",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
        onnx.save_model(make_model(graph), out)
    elif kind == "subgraph":
        inits = [f32("late.weight", [4, 4]), f32("onnx::MatMul_9", [4, 4]),
                 f32("onnx::MatMul_8", [4, 4])]
        then_g = helper.make_graph(
            [helper.make_node("MatMul", ["x", "onnx::MatMul_9"], ["t"], name="/then/MatMul")],
            "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4])])
        else_g = helper.make_graph(
            [helper.make_node("MatMul", ["x", "onnx::MatMul_8"], ["e"], name="/else/MatMul")],
            "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 4])])
        branch = helper.make_node("If", ["cond"], ["y"], name="/branch/If",
                                  then_branch=then_g)
        # A `graphs` attribute (the else body) listed before the `g` one (the
        # then body): attributes are walked in their order.
        branch.attribute.insert(0, helper.make_attribute("bodies", [else_g]))
        nodes = [branch,
                 helper.make_node("MatMul", ["y", "late.weight"], ["z"], name="/late/MatMul")]
        graph = helper.make_graph(
            nodes, "subgraph",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])], initializer=inits)
        onnx.save_model(make_model(graph), out)
    elif kind == "wire":
        with open(out, "wb") as f:
            f.write(wire_model())
    elif kind == "toomany":
        with open(out, "wb") as f:
            f.write(too_many_model())
    elif kind == "deep":
        body = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w.weight"], ["y0"], name="/w/MatMul")],
            "body", [], [helper.make_tensor_value_info("y0", TensorProto.FLOAT, [1, 4])])
        for level in range(40):
            body = helper.make_graph(
                [helper.make_node("If", ["cond"], [f"y{level + 1}"], name=f"/if{level}/If",
                                  then_branch=body)],
                f"level{level}", [],
                [helper.make_tensor_value_info(f"y{level + 1}", TensorProto.FLOAT, [1, 4])])
        graph = helper.make_graph(
            body.node, "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("y40", TensorProto.FLOAT, [1, 4])],
            initializer=[f32("w.weight", [4, 4])])
        with open(out, "wb") as f:
            f.write(make_model(graph).SerializeToString())
    elif kind == "truncated":
        data = make_model(folded_graph("truncated")).SerializeToString()
        with open(out, "wb") as f:
            f.write(data[:len(data) // 2])
    elif kind == "badnames":
        inits = [f32("good.weight", [4, 4]), f32("bad\nname.weight", [4, 4]),
                 f32("tab\tname", [4]), f32("x" * 4097, [4])]
        graph = helper.make_graph(
            [], "badnames", [], [], initializer=inits)
        onnx.save_model(make_model(graph), out)
    elif kind in ("sourcenames", "nodenames"):
        with open(out, "wb") as f:
            f.write(source_names_model() if kind == "sourcenames" else node_names_model())
    elif kind == "graphname":
        graph = helper.make_graph([], "main\nparam forged", [], [],
                                  initializer=[f32("w.weight", [4, 4])])
        onnx.save_model(make_model(graph), out)
    elif kind in ("dupsame", "dupdims", "dupdata"):
        first = numpy_helper.from_array(np.ones([4, 4], dtype=np.float32), "fc.weight")
        second = {"dupsame": first,
                  "dupdims": numpy_helper.from_array(np.ones([4, 2], dtype=np.float32),
                                                     "fc.weight"),
                  "dupdata": numpy_helper.from_array(np.full([4, 4], 2, dtype=np.float32),
                                                     "fc.weight")}[kind]
        nodes = [helper.make_node("MatMul", ["x", "fc.weight"], ["y"], name="/fc/MatMul")]
        graph = helper.make_graph(
            nodes, "dup", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
            initializer=[first, f32("other.weight", [4, 4]), second])
        onnx.save_model(make_model(graph), out)
    else:
        sys.exit(f"make_onnx.py: unknown kind '{kind}'\n{__doc__}")


if __name__ == "__main__":
    main()
