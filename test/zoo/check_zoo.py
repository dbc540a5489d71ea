#!/usr/bin/env python3
"""Plans every export of the zoo (export_zoo.py) with dmuonc and checks each
plan against torch's named_parameters() and named_buffers():

  train exports    every param once, with torch's name and shape; no buffer
                   in the plan's params; no vector-like tensor on Muon; one
                   hook group per block plus at most MAX_ROOTS others
  every export     each nn.MultiheadAttention in_proj_weight [3E, E] that
                   keeps its name is orthogonalized as Q, K, V blocks (and
                   the zoo has such a model: ViT)
  default exports  no silent entry: a plan entry that is not a torch param
                   (name and shape) is named in a warning, and under
                   --strict-names dmuonc refuses the model, saying how to
                   export instead; a torch param missing from the plan
                   (folded away) comes with a warning too

Usage: check_zoo.py DMUONC ZOODIR [--table] [MODEL...]

--table prints the table only (exit 0), e.g. to measure another dmuonc.
Exits 77 (skip) when ZOODIR holds no exports because torch or torchvision
is missing.
"""
import json
import os
import re
import subprocess
import sys

# Root modules (stem, final norm, head, downsamples between stages) that hold
# params outside every block.
MAX_ROOTS = 8
# Not vectors by shape, but what Muon's authors keep on AdamW all the same.
VECTOR_NAMES = re.compile(r"pos_embedding|class_token|cls_token|layer_scale|"
                          r"relative_position_bias_table|relative_attention_bias|"
                          r"position_embeddings")


def run_dmuonc(dmuonc, onnx, extra=()):
    r = subprocess.run([dmuonc, onnx, "--mesh", "8", "--emit=json", *extra],
                       capture_output=True, text=True)
    plan = json.loads(r.stdout) if r.returncode == 0 and r.stdout else None
    return r.returncode, plan, r.stderr


def vector_like(name, shape):
    return sum(1 for d in shape if d > 1) <= 1 or bool(VECTOR_NAMES.search(name))


def measure(dmuonc, zoo, model, mode):
    torch_side = json.load(open(os.path.join(zoo, model + ".json")))
    params = {p["name"]: p["shape"] for p in torch_side["params"]}
    buffers = {b["name"] for b in torch_side["buffers"]}
    blocks = torch_side["blocks"]
    onnx = os.path.join(zoo, f"{model}.{mode}.onnx")
    rc, plan, stderr = run_dmuonc(dmuonc, onnx)
    if plan is None:
        return {"error": f"dmuonc exited {rc}: {stderr.strip()[:400]}"}
    seen = {}
    for p in plan["params"]:
        seen[p["name"]] = seen.get(p["name"], 0) + 1
    entries = plan["params"]
    matched = [p for p in entries if params.get(p["name"]) == p["shape"]]
    extras = [p for p in entries if params.get(p["name"]) != p["shape"]]
    warned = "\n".join(l for l in stderr.splitlines() if "warning:" in l or "note:" in l
                       or l.startswith("  "))
    silent = [p["name"] for p in extras
              if p["name"] not in warned and p.get("source_name", "\0") not in warned]
    hooks = [g["name"] for g in plan["hook_groups"]]
    return {
        "params": len(params),
        "matched": len({p["name"] for p in matched}),
        "duplicates": sum(1 for n, c in seen.items() if c > 1),
        "extras": [p["name"] for p in extras],
        "silent": silent,
        "missing": sorted(set(params) - {p["name"] for p in matched}),
        "buffers": [p["name"] for p in entries if p["name"] in buffers],
        # The plan's own list of what it left out (1.7): never a param, and
        # in a training export every float buffer torch names.
        "listed_params": [b["name"] for b in plan.get("buffers", []) if b["name"] in params],
        "unlisted": sorted(b["name"] for b in torch_side["buffers"]
                           if b["dtype"].startswith("float")
                           and b["name"] not in {x["name"] for x in plan.get("buffers", [])}),
        "vectors": [p["name"] for p in entries
                    if p["role"] == "muon" and vector_like(p["name"], p["shape"])],
        # nn.MultiheadAttention's fused [3E, E] projection: orthogonalized as
        # its Q, K and V rows by default (1.9 blocks).
        "in_proj": sum(1 for p in entries if p["name"].endswith("in_proj_weight")),
        "in_proj_unsplit": [p["name"] for p in entries
                            if p["name"].endswith("in_proj_weight") and p["role"] == "muon"
                            and p.get("blocks") != {"dim": "rows", "source": "in_proj",
                                                    "sizes": [p["shape"][1]] * 3}],
        "groups": len(hooks),
        "blocks": len(blocks),
        "blocks_missing": [b for b in blocks if b not in hooks],
        "warned": bool(warned),
        "onnx": onnx,
    }


def problems(dmuonc, model, mode, m):
    if "error" in m:
        return [m["error"]]
    out = []
    if m["duplicates"]:
        out.append(f"{m['duplicates']} names planned more than once")
    if m["buffers"]:
        out.append(f"buffers planned as params: {m['buffers'][:5]}")
    if m["listed_params"]:
        out.append(f"params listed as buffers: {m['listed_params'][:5]}")
    if m["vectors"]:
        out.append(f"vector-like tensors on Muon: {m['vectors'][:5]}")
    if m["in_proj_unsplit"]:
        out.append(f"in_proj_weight not split in Q, K, V: {m['in_proj_unsplit'][:5]}")
    if mode == "train":
        if m["extras"] or m["missing"]:
            out.append(f"not torch's params: extra {m['extras'][:5]}, missing {m['missing'][:5]}")
        if m["unlisted"]:
            out.append(f"torch's float buffers missing from the plan's buffers: {m['unlisted'][:5]}")
        if m["blocks_missing"]:
            out.append(f"blocks without their own hook group: {m['blocks_missing'][:5]}")
        if m["groups"] - m["blocks"] > MAX_ROOTS:
            out.append(f"{m['groups']} hook groups for {m['blocks']} blocks")
        return out
    if m["silent"]:
        out.append(f"entries that are not torch params, in no warning: {m['silent'][:5]}")
    if m["missing"] and not m["warned"]:
        out.append(f"torch params missing from the plan without a warning: {m['missing'][:5]}")
    rc, _, stderr = run_dmuonc(dmuonc, m["onnx"], ["--strict-names"])
    unmatched = m["extras"] or m["missing"]
    if unmatched and (rc == 0 or "do_constant_folding=False" not in stderr):
        out.append(f"--strict-names: exit {rc} without the export advice")
    if not unmatched and rc != 0:
        out.append(f"--strict-names refused an export whose names all match: {stderr[:200]}")
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "--table"]
    table_only = "--table" in sys.argv
    if len(args) < 2:
        sys.exit(__doc__)
    dmuonc, zoo, only = args[0], args[1], args[2:]
    if not os.path.isdir(zoo) or not any(f.endswith(".json") for f in os.listdir(zoo)):
        try:
            import torch  # noqa: F401
            import torchvision  # noqa: F401
        except ImportError as e:
            print(f"check_zoo.py: skipped: {e} (install python3-torch python3-torchvision)")
            return 77
        print(f"check_zoo.py: no exports in {zoo}: build the zoo-exports target")
        return 1
    models = only or sorted(f[:-5] for f in os.listdir(zoo) if f.endswith(".json"))
    print(f"{'model':20} {'mode':8} {'matched':>9} {'extra':>5} {'silent':>6} {'buffers':>7}"
          f" {'vectors':>7} {'groups/blocks':>13}")
    failures = []
    split = 0
    for model in models:
        for mode in ("train", "default"):
            m = measure(dmuonc, zoo, model, mode)
            if "error" in m:
                print(f"{model:20} {mode:8} {m['error']}")
            else:
                print(f"{model:20} {mode:8} {m['matched']:>4}/{m['params']:<4} "
                      f"{len(m['extras']):>5} {len(m['silent']):>6} {len(m['buffers']):>7} "
                      f"{len(m['vectors']):>7} {m['groups']:>6}/{m['blocks']:<6}")
                split += m["in_proj"] - len(m["in_proj_unsplit"])
            if not table_only:
                failures += [f"{model}.{mode}: {p}" for p in problems(dmuonc, model, mode, m)]
    if not only and not split:
        failures.append("no export has an in_proj_weight split in Q, K, V (ViT has three)")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
