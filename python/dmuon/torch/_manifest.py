"""The plan from the model itself: dmuonc's TOML manifest written from
named_parameters(), and dmuonc run on it (hosts/torch/DmuonTorch.cpp's
manifestToml and runDmuonc, with the same text, so that a Python and a C++
host of one model compile the same plan)."""

import os
import shutil
import subprocess

import torch

from .. import _paths

_TOML_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
                torch.float64: "f64"}


def _toml_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def manifest_toml(model, model_name="model", optimizer=""):
    """dmuonc's manifest (docs/manifest-format.md) for the module's params, in
    registration order, which must be forward order. `optimizer`: "" leaves
    the choice to dmuonc's select pass; "adamw" or "muon" is written as every
    param's."""
    lines = ["# dmuonc manifest written from named_parameters(), in forward order.",
             "[model]", f"name = {_toml_string(model_name)}"]
    for name, p in model.named_parameters():
        dtype = _TOML_DTYPES.get(p.dtype)
        if dtype is None:
            raise ValueError(f"param '{name}': dmuon has no dtype for {p.dtype}")
        lines += ["", "[[param]]", f"name = {_toml_string(name)}",
                  "shape = [" + ", ".join(str(n) for n in p.shape) + "]",
                  f'dtype = "{dtype}"']
        if optimizer:
            lines.append(f"optimizer = {_toml_string(optimizer)}")
    return "\n".join(lines) + "\n"


def find_dmuonc():
    """dmuonc: $DMUON_DMUONC, else the one installed or built with this
    package, else the first on PATH."""
    env = os.environ.get("DMUON_DMUONC")
    if env:
        return env
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates = []
    if _paths.DMUONC_RELATIVE:
        candidates.append(os.path.normpath(os.path.join(here, _paths.DMUONC_RELATIVE)))
    if _paths.DMUONC_ABSOLUTE:
        candidates.append(_paths.DMUONC_ABSOLUTE)
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    on_path = shutil.which("dmuonc")
    if on_path:
        return on_path
    raise FileNotFoundError("dmuon.torch: no dmuonc (tried " + ", ".join(candidates + ["PATH"]) +
                            "); set DMUON_DMUONC or pass a plan")


def run_dmuonc(args, dmuonc=None):
    """Runs `dmuonc args...`; raises RuntimeError with its diagnostics unless
    it exits with status 0."""
    exe = dmuonc or find_dmuonc()
    done = subprocess.run([exe, *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"dmuonc failed (exit status {done.returncode}): "
                           f"{' '.join([exe, *map(str, args)])}\n{done.stderr.strip()}")


def compile_plan(model, mesh, work_dir, communicator=None, model_name="model", optimizer="",
                 dmuonc_args=(), dmuonc=None):
    """Rank 0 writes the manifest into `work_dir` and compiles it for `mesh`;
    every rank learns whether it worked (so none waits for a plan that will
    not come) and gets the plan's path."""
    manifest = os.path.join(work_dir, f"{model_name}.toml")
    plan = os.path.join(work_dir, f"{model_name}-{mesh}.plan")
    rank = communicator.Get_rank() if communicator is not None else 0
    error = None
    if rank == 0:
        try:
            os.makedirs(work_dir, exist_ok=True)
            with open(manifest, "w") as f:
                f.write(manifest_toml(model, model_name, optimizer))
            run_dmuonc([manifest, "--mesh", mesh, *dmuonc_args, "-o", plan], dmuonc)
        except Exception as e:  # every rank must hear of it, whatever it was
            error = f"{type(e).__name__}: {e}"
    if communicator is not None:
        error = communicator.bcast(error, root=0)
    if error is not None:
        raise RuntimeError(error if rank == 0 else f"rank 0 could not compile the plan: {error}")
    return plan
