"""dmuon.torch: a torch.nn.Module trained through libdmuon, behind a
torch.optim.Optimizer.

    import dmuon.torch
    # under mpirun (mpi4py), or torchrun after torch.distributed.init_process_group()
    opt = dmuon.torch.wrap(model, mesh="2x2", work_dir="work")
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    for batch in data:
        opt.zero_grad()
        loss = loss_fn(model(batch))
        loss.backward()
        opt.step()
        sched.step()

wrap() finds the launch's process group (_launch.py: mpi4py or
torch.distributed) and the device layer for where the params live
(_device.py: CPU tensors on the MPI backend, CUDA tensors on NCCL), writes
dmuonc's manifest from the module (conv views, frozen and tied params, fused
QKV: _manifest.py), compiles it for the mesh on rank 0 (or takes a plan),
creates the runtime, binds the params and hands their memory to the runtime
(ParamBridge); the model's own forward and backward then drive the hooks.
docs/python.md.
"""

import torch as _torch  # noqa: F401  (dmuon.torch needs torch; fail here if absent)

from .. import _capi
from .._core import Plan
from .._runtime import Runtime
from ._bridge import ParamBridge, check_param_tensor
from ._device import device_layer
from ._launch import LaunchError, check_world_size, launch_group
from ._manifest import (MATRIX_RULES, check_optimizer, compile_plan, find_dmuonc, manifest_toml,
                        run_dmuonc)
from ._optimizer import DmuonOptimizer

DmuonModel = DmuonOptimizer  # the name before it was an optimizer

__all__ = ["wrap", "launch_group", "DmuonOptimizer", "DmuonModel", "LaunchError", "manifest_toml",
           "run_dmuonc", "compile_plan", "find_dmuonc"]

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
    dmuonc_args: more dmuonc flags. communicator: an mpi4py communicator;
    without one, torch.distributed's initialized default group (torchrun),
    else MPI.COMM_WORLD under mpirun, else this process alone (a plain
    `python3 train.py`), or a LaunchError for a half-made torchrun launch. The params' device picks the backend: CPU tensors MPI, CUDA
    tensors NCCL on the current stream (docs/python.md, "On GPUs"). mode:
    "z2", "z3" or a dmuon.MODE_*. Other keywords are runtime options
    (dmuon.runtime_options): lr, momentum, weight_decay, adamw_lr, ...,
    accumulation, max_grad_norm, clip_policy, momentum_form. Every rank calls
    it, with the same values."""
    check_optimizer(optimizer)
    for name, t in model.named_parameters():
        check_param_tensor(name, t)
    if isinstance(mode, str) or mode is None:
        if mode not in _MODES:
            raise ValueError(f"mode must be 'z2', 'z3' or a dmuon.MODE_* value, not {mode!r}")
        mode = _MODES[mode]
    device = device_layer(model)
    group = launch_group(communicator)
    if group.kind == "torch" and device.type == "cuda":
        group.cuda_device = device.index  # NCCL's object collectives stage there
    device.check_launch(group)  # every rank raises alike, before any plan is made
    if plan is None:
        plan = compile_plan(model, mesh or str(group.world_size), work_dir, group,
                            model_name, optimizer, dmuonc_args, dmuonc)
    if not isinstance(plan, Plan):
        plan = Plan(plan)
    check_world_size(plan.world_size, group,
                     f"the plan (mesh {mesh!r})" if mesh else "the plan")
    runtime = device.runtime(plan, group, mode=mode, **options)
    try:
        bridge = ParamBridge(runtime, plan, model, device)
        rule = "adamw" if optimizer == "adamw" else _matrix_rule(optimizer, dmuonc_args)
        return DmuonOptimizer(model, plan, runtime, bridge, group,
                              "muon" if rule == "adamw" else rule, _fixed(runtime.options),
                              device)
    except Exception:
        runtime.close()
        device.close()
        raise


# AdamW's fixed rows where the runtime's options leave them unset: the plan
# records common/HyperParams.def's defaults for them (dmuonc has no flag).
_ADAMW_FIXED_DEFAULTS = {"adamw_beta1": 0.9, "adamw_beta2": 0.999, "adamw_eps": 1e-8}


def _fixed(options):
    import math
    return {k: (_ADAMW_FIXED_DEFAULTS[k] if math.isnan(getattr(options, k)) else getattr(options, k))
            for k in _ADAMW_FIXED_DEFAULTS}
