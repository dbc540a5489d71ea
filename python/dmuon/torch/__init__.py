"""dmuon.torch: a torch.nn.Module trained through libdmuon, behind a
torch.optim.Optimizer.

    from mpi4py import MPI
    import dmuon.torch
    opt = dmuon.torch.wrap(model, mesh="2x2", communicator=MPI.COMM_WORLD, work_dir="work")
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    for batch in data:
        opt.zero_grad()
        loss = loss_fn(model(batch))
        loss.backward()
        opt.step()
        sched.step()

wrap() writes dmuonc's manifest from the module (conv views, frozen and tied
params, fused QKV: _manifest.py), compiles it for the mesh on rank 0 (or
takes a plan), creates the runtime on the communicator, binds the params and
hands their memory to the runtime (ParamBridge); the model's own forward and
backward then drive the hooks. docs/python.md.
"""

import torch as _torch  # noqa: F401  (dmuon.torch needs torch; fail here if absent)

from .. import _capi
from .._core import Plan
from .._runtime import Runtime
from ._bridge import ParamBridge, check_param_tensor
from ._manifest import (MATRIX_RULES, check_optimizer, compile_plan, find_dmuonc, manifest_toml,
                        run_dmuonc)
from ._optimizer import DmuonOptimizer

DmuonModel = DmuonOptimizer  # the name before it was an optimizer

__all__ = ["wrap", "DmuonOptimizer", "DmuonModel", "manifest_toml", "run_dmuonc",
           "compile_plan", "find_dmuonc"]

_MODES = {"z2": _capi.MODE_Z2, "z3": _capi.MODE_Z3, None: _capi.MODE_FROM_PLAN}


def _matrix_rule(optimizer, dmuonc_args):
    """The rule of the plan's matrices: `optimizer`, else dmuonc's
    --matrix-optimizer among dmuonc_args, else Muon."""
    if optimizer in MATRIX_RULES:
        return optimizer
    for a in dmuonc_args:
        if str(a).startswith("--matrix-optimizer="):
            return str(a).split("=", 1)[1]
    return "muon"


def wrap(model, *, communicator=None, plan=None, mesh=None, work_dir="dmuon-work",
         model_name="model", optimizer="", dmuonc_args=(), dmuonc=None, mode=None, **options):
    """Trains `model` through libdmuon: returns its DmuonOptimizer.

    plan: a dmuon.Plan or a plan file; without one, `mesh` (dmuonc --mesh,
    default: the world size) is compiled from the model on rank 0 in
    `work_dir`. optimizer: the rule for the matrices ("muon", the default,
    "normuon", "soap", "shampoo"; every other param stays on AdamW), or
    "adamw" for every param; with plan=, say which rule the plan has.
    dmuonc_args: more dmuonc flags. communicator: an mpi4py communicator
    (default MPI.COMM_WORLD). mode: "z2", "z3" or a dmuon.MODE_*. Other
    keywords are runtime options (dmuon.runtime_options): lr, momentum,
    weight_decay, adamw_lr, ..., accumulation, max_grad_norm, clip_policy,
    momentum_form. Every rank calls it, with the same values."""
    check_optimizer(optimizer)
    for name, t in model.named_parameters():
        check_param_tensor(name, t)
    if isinstance(mode, str) or mode is None:
        if mode not in _MODES:
            raise ValueError(f"mode must be 'z2', 'z3' or a dmuon.MODE_* value, not {mode!r}")
        mode = _MODES[mode]
    if communicator is None:
        from mpi4py import MPI
        communicator = MPI.COMM_WORLD
    if plan is None:
        plan = compile_plan(model, mesh or str(communicator.Get_size()), work_dir, communicator,
                            model_name, optimizer, dmuonc_args, dmuonc)
    if not isinstance(plan, Plan):
        plan = Plan(plan)
    runtime = Runtime(plan, communicator, mode=mode, **options)
    try:
        bridge = ParamBridge(runtime, plan, model)
        rule = "adamw" if optimizer == "adamw" else _matrix_rule(optimizer, dmuonc_args)
        return DmuonOptimizer(model, plan, runtime, bridge, communicator,
                              "muon" if rule == "adamw" else rule, _fixed(runtime.options))
    except Exception:
        runtime.close()
        raise


# AdamW's fixed rows where the runtime's options leave them unset: the plan
# records common/HyperParams.def's defaults for them (dmuonc has no flag).
_ADAMW_FIXED_DEFAULTS = {"adamw_beta1": 0.9, "adamw_beta2": 0.999, "adamw_eps": 1e-8}


def _fixed(options):
    import math
    return {k: (_ADAMW_FIXED_DEFAULTS[k] if math.isnan(getattr(options, k)) else getattr(options, k))
            for k in _ADAMW_FIXED_DEFAULTS}
