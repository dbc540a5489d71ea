"""The plan from the model itself: dmuonc's TOML manifest written from the
module's params, and dmuonc run on it (hosts/torch/DmuonTorch.cpp's
manifestToml and runDmuonc write the same text, so that a Python and a C++
host of one model compile the same plan; docs/python.md, "What wrap plans").

What a torch module says that its param list does not, written down as the
ONNX frontend would find it in an export:
- a convolution's weight `[out, in, k...]` is one matrix `[out, in*k...]`
  (`conv = true`), not out*in separate k x k matrices;
- a frozen param (requires_grad=False) is the host's (`route = "host"`):
  the runtime holds nothing of it, so nothing steps, decays or keeps state
  for it, and it keeps the module's own memory;
- a fused attention projection (`qkv`, `Wqkv`, `c_attn`, `qkv_proj`) whose
  shape is three equal blocks is orthogonalized per block (`ns_split = 3`),
  as dmuonc already does for `in_proj_weight`; another shape is planned
  whole, with a warning naming --ns-split;
- a param reachable under several names (tied weights) is written once,
  under its first name (named_parameters() order).
"""

import os
import re
import shutil
import subprocess
import warnings

import torch

from .. import _paths

_TOML_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
                torch.float64: "f64"}

# The rules `optimizer=` picks for the matrices (dmuonc --matrix-optimizer);
# "adamw" puts every param on AdamW.
MATRIX_RULES = ("muon", "normuon", "soap", "shampoo")
# Rules that orthogonalize, and so take per-block NS (blocks are refused on
# SOAP and Shampoo, whose statistics cover the whole matrix).
_BLOCKED_RULES = ("muon", "normuon")
_FUSED_QKV = re.compile(r"(^|\.)(qkv|Wqkv|qkv_proj|c_attn)\.weight$")
_CONV_TYPES = (torch.nn.modules.conv._ConvNd,)


def _toml_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_optimizer(optimizer):
    """'' (dmuonc's default rule, Muon), a matrix rule, or 'adamw'."""
    if optimizer not in ("", "adamw") + MATRIX_RULES:
        raise ValueError(f"optimizer={optimizer!r}: expected one of 'muon', 'normuon', 'soap', "
                         "'shampoo' (the rule for the matrices; everything else stays on "
                         "AdamW) or 'adamw' (every param on AdamW)")


def conv_weight_names(model):
    """Names of the params that are a convolution's weight (>= 3 dims)."""
    names = set()
    for prefix, module in model.named_modules():
        if isinstance(module, _CONV_TYPES) and module.weight is not None \
                and module.weight.dim() >= 3:
            names.add(f"{prefix}.weight" if prefix else "weight")
    return names


def fused_qkv_split(name, shape):
    """(blocks, dim) for a fused QKV weight whose shape is three equal
    blocks, None for any other param; warns for a fused name of another
    shape (grouped-query attention's unequal Q, K, V)."""
    if not _FUSED_QKV.search(name) or len(shape) != 2:
        return None
    rows, cols = shape
    if rows == 3 * cols:
        return 3, "rows"
    if cols == 3 * rows:  # transformers' Conv1D stores [in, 3 * out]
        return 3, "cols"
    warnings.warn(f"param '{name}' {tuple(shape)} looks like a fused Q/K/V projection but is not "
                  "three equal blocks: it is orthogonalized whole; give its blocks with "
                  f"dmuonc_args=['--ns-split={re.escape(name)}=a,b,c'] (docs/dmuonc.md, "
                  "\"Matrix blocks\")", stacklevel=3)
    return None


def manifest_toml(model, model_name="model", optimizer=""):
    """dmuonc's manifest (docs/manifest-format.md) for the module's params, in
    registration order, which must be forward order. `optimizer`: "" or a
    matrix rule leaves the choice of matrices to dmuonc's select pass (the
    rule itself is dmuonc's --matrix-optimizer: compile_plan passes it);
    "adamw" is written as every param's."""
    check_optimizer(optimizer)
    convs = conv_weight_names(model)
    lines = ["# dmuonc manifest written from named_parameters(), in forward order.",
             "[model]", f"name = {_toml_string(model_name)}"]
    for name, p in model.named_parameters():
        dtype = _TOML_DTYPES.get(p.dtype)
        if dtype is None:
            raise ValueError(f"param '{name}': dmuon has no dtype for {p.dtype}")
        lines += ["", "[[param]]", f"name = {_toml_string(name)}",
                  "shape = [" + ", ".join(str(n) for n in p.shape) + "]",
                  f'dtype = "{dtype}"']
        if not p.requires_grad:
            lines += ['optimizer = "adamw"', 'route = "host"']
            continue
        if optimizer == "adamw":
            lines.append('optimizer = "adamw"')
            continue
        if name in convs:
            lines.append("conv = true")
        if (optimizer or "muon") in _BLOCKED_RULES:
            split = fused_qkv_split(name, tuple(p.shape))
            if split:
                lines.append(f"ns_split = {split[0]}")
                if split[1] == "cols":
                    lines.append('ns_split_dim = "cols"')
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
    """Rank 0 writes the manifest into `work_dir` and compiles it for `mesh`
    (a matrix rule as `optimizer` becomes --matrix-optimizer); every rank
    learns whether it worked (so none waits for a plan that will not come)
    and gets the plan's path. communicator: an mpi4py communicator, a
    launch group (dmuon.torch._launch), or None for one process."""
    from ._launch import as_group
    check_optimizer(optimizer)
    group = as_group(communicator)
    manifest = os.path.join(work_dir, f"{model_name}.toml")
    plan = os.path.join(work_dir, f"{model_name}-{mesh}.plan")
    rule_flag = [f"--matrix-optimizer={optimizer}"] if optimizer in MATRIX_RULES else []
    rank = group.rank if group is not None else 0
    error = None
    if rank == 0:
        try:
            os.makedirs(work_dir, exist_ok=True)
            with open(manifest, "w") as f:
                f.write(manifest_toml(model, model_name, optimizer))
            run_dmuonc([manifest, "--mesh", mesh, *rule_flag, *dmuonc_args, "-o", plan], dmuonc)
        except Exception as e:  # every rank must hear of it, whatever it was
            error = f"{type(e).__name__}: {e}"
    if group is not None:
        error = group.broadcast_object(error, root=0)
    if error is not None:
        raise RuntimeError(error if rank == 0 else f"rank 0 could not compile the plan: {error}")
    return plan
