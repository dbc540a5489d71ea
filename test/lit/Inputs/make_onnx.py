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
  badnames  initializers named with a newline, a tab, and 4097 bytes, and
            one good name (names must be 1 to 4096 bytes without control
            characters).

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


def make_model(graph):
    return helper.make_model(graph, producer_name="make_onnx.py",
                             opset_imports=[helper.make_opsetid("", 17)])


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "folded":
        onnx.save_model(make_model(folded_graph("folded_mlp")), out)
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
    elif kind == "badnames":
        inits = [f32("good.weight", [4, 4]), f32("bad\nname.weight", [4, 4]),
                 f32("tab\tname", [4]), f32("x" * 4097, [4])]
        graph = helper.make_graph(
            [], "badnames", [], [], initializer=inits)
        onnx.save_model(make_model(graph), out)
    else:
        sys.exit(f"make_onnx.py: unknown kind '{kind}'\n{__doc__}")


if __name__ == "__main__":
    main()
