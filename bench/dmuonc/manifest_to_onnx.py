#!/usr/bin/env python3
"""Writes a shape-only ONNX export of a model manifest, for timing dmuonc on
the largest inputs (docs/benchmarks.md, "dmuonc on the largest models").

Usage: manifest_to_onnx.py PARAMS.json OUT.onnx

PARAMS.json is `dmuonc MODEL.toml --mesh 1 --stop-after=frontend --emit=json`:
the manifest's params with repeats expanded. Every param becomes an
initializer whose data is external (location "weights.bin", never written),
as `torch.onnx.export` leaves a model saved with save_as_external_data; a
matrix is consumed by a MatMul, a vector by an Add, in model order, so the
frontend recovers names and order as from a real export. Only
onnx.helper is used, so Debian's python3-onnx (1.12) works.
"""
import json
import sys

import onnx
from onnx import TensorProto, helper

DTYPES = {"f32": TensorProto.FLOAT, "bf16": TensorProto.BFLOAT16,
          "f16": TensorProto.FLOAT16, "f64": TensorProto.DOUBLE}


def shape_only(name, shape, dtype, offset):
    t = TensorProto()
    t.name = name
    t.data_type = DTYPES[dtype]
    t.dims.extend(shape)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", str(offset)),
                       ("length", "0")):
        entry = t.external_data.add()
        entry.key = key
        entry.value = value
    return t


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    params = json.load(open(sys.argv[1]))["params"]
    inits, nodes = [], []
    x = "x"
    for i, p in enumerate(params):
        inits.append(shape_only(p["name"], p["shape"], p["dtype"], i))
        y = f"h{i}"
        op = "MatMul" if len(p["shape"]) >= 2 else "Add"
        nodes.append(helper.make_node(op, [x, p["name"]], [y], name=f"/{p['name']}/{op}"))
        x = y
    graph = helper.make_graph(
        nodes, "shape_only", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, producer_name="manifest_to_onnx.py",
                              opset_imports=[helper.make_opsetid("", 17)])
    with open(sys.argv[2], "wb") as f:
        f.write(model.SerializeToString())


if __name__ == "__main__":
    main()
