#!/usr/bin/env python3
"""Exports the zoo (models.py) with torch.onnx.export, each model both ways
users export it:

  train    training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False
           (every parameter stays an initializer under its own name)
  default  eval mode with constant folding, torch.onnx.export's defaults

Usage: export_zoo.py OUTDIR [MODEL...]

Writes OUTDIR/<model>.<mode>.onnx and OUTDIR/<model>.json: torch's
named_parameters() and named_buffers() (name, shape, dtype) and the blocks
(module paths of the block classes). Exits 77 (the zoo test's skip code)
when torch or torchvision is missing. Nothing is downloaded (weights=None).
"""
import json
import os
import sys
import warnings

try:
    import torch
    import torchvision  # noqa: F401  (models.py needs it)
except ImportError as e:
    print(f"export_zoo.py: skipped: {e}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

MODES = {
    "train": dict(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False),
    "default": dict(),
}


def describe(model, blocks):
    params = [{"name": n, "shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", "")}
              for n, p in model.named_parameters()]
    buffers = [{"name": n, "shape": list(b.shape), "dtype": str(b.dtype).replace("torch.", "")}
               for n, b in model.named_buffers()]
    block_paths = [n for n, m in model.named_modules() if isinstance(m, blocks)]
    return {"params": params, "buffers": buffers, "blocks": block_paths}


def export(name, outdir):
    model, example, blocks = models.build(name)
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(describe(model, blocks), f, indent=1)
    for mode, kwargs in MODES.items():
        model.train(mode == "train")
        path = os.path.join(outdir, f"{name}.{mode}.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, example, path, opset_version=14, **kwargs)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    names = sys.argv[2:] or list(models.ZOO)
    for name in names:
        export(name, outdir)
    print(f"exported {len(names)} models x {len(MODES)} modes to {outdir}")


if __name__ == "__main__":
    main()
