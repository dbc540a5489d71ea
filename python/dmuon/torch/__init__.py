"""dmuon.torch: a torch.nn.Module trained through libdmuon, in one call.

    from mpi4py import MPI
    import dmuon.torch
    dm = dmuon.torch.wrap(model, mesh="2x2", communicator=MPI.COMM_WORLD, work_dir="work")
    for batch in data:
        loss = loss_fn(model(batch))
        loss.backward()
        dm.step()

wrap() writes dmuonc's manifest from named_parameters() (registration order
must be forward order), compiles it for the mesh on rank 0 (or takes a plan),
creates the runtime on the communicator, binds the params and hands their
memory to the runtime (ParamBridge); the model's own forward and backward then
drive the hooks. Between steps the params of hook groups hold no values:
evaluate a replica filled by gather_into(). docs/python.md.
"""

import torch as _torch  # noqa: F401  (dmuon.torch needs torch; fail here if absent)

from .. import _capi
from .._core import Plan
from .._runtime import Runtime
from ._bridge import ParamBridge
from ._manifest import compile_plan, find_dmuonc, manifest_toml, run_dmuonc

__all__ = ["wrap", "DmuonModel", "manifest_toml", "run_dmuonc", "compile_plan", "find_dmuonc"]


class DmuonModel:
    """The runtime and the bridge of one wrapped model (what wrap() returns)."""

    def __init__(self, model, plan, runtime):
        self.model = model
        self.plan = plan
        self.runtime = runtime
        self.bridge = ParamBridge(runtime, plan, model)

    @property
    def host_params(self):
        """Params the plan routes to the host (ROUTE_HOST): not the runtime's;
        the host averages and steps them itself."""
        return list(self.bridge.host_params)

    def begin_micro_batch(self, is_last):
        """Before a micro-batch's forward: is_last=False for every micro-batch
        of a step but the last (scale the loss by 1/k, as with torch)."""
        self.runtime.begin_micro_batch(is_last)

    def step(self):
        """Finishes the backward (groups whose gradients did not all arrive)
        and steps: True when applied, False when skipped for a non-finite
        gradient (nothing changed)."""
        self.bridge.end_backward()
        return self.runtime.step()

    def set_hyper_params(self, **values):
        """Collective: lr, momentum, weight_decay (Muon), adamw_lr,
        adamw_weight_decay from the next step; None or absent: unchanged."""
        self.runtime.set_hyper_params(**values)

    def hyper_params(self):
        return self.runtime.hyper_params()

    def grad_norm(self):
        return self.runtime.grad_norm()

    def set_qk_max_logits(self, pair, max_logits):
        """This rank's per-head maximum attention logits of QK-Clip pair `pair`
        for the coming step (a tensor or array of the pair's heads)."""
        self.runtime.set_qk_max_logits(pair, max_logits)

    def qk_clip_counts(self):
        return self.runtime.qk_clip_counts()

    def gather_into(self, copy):
        """Copies every param's current values (the optimizer's fp32 master)
        into the same-named params of `copy` (an evaluation replica).
        Collective: every rank calls it, between steps."""
        named = dict(copy.named_parameters())
        with _torch.no_grad():
            for p in self.bridge.params:
                dst = named.get(p.name)
                shape = self.runtime.local_shape(p.index)
                if dst is None or dst.dtype != _torch.float32 or tuple(dst.shape) != shape:
                    raise ValueError(f"gather_into: the copy has no f32 param '{p.name}' of "
                                     f"shape {shape}")
                dst.copy_(_torch.from_numpy(self.runtime.gather_param(p.name)))
        return copy

    def state_dict(self):
        """{name: tensor} of every param's current values (a collective)."""
        return {p.name: _torch.from_numpy(self.runtime.gather_param(p.name))
                for p in self.bridge.params}

    def save_checkpoint(self, path, step):
        self.runtime.save_checkpoint(path, step)

    def load_checkpoint(self, path):
        return self.runtime.load_checkpoint(path)

    def close(self):
        """Unhooks the model and destroys the runtime; the model's params are
        left empty (gather_into a replica first to keep their values)."""
        self.bridge.close()
        self.runtime.close()


def wrap(model, *, communicator=None, plan=None, mesh=None, work_dir="dmuon-work",
         model_name="model", optimizer="", dmuonc_args=(), dmuonc=None, mode=None, **options):
    """Trains `model` through libdmuon: returns a DmuonModel.

    plan: a dmuon.Plan or a plan file; without one, `mesh` (dmuonc --mesh,
    default: the world size) is compiled from the model on rank 0 in
    `work_dir`, with `optimizer` ("", "muon", "adamw": dmuonc's select, or
    every param's) and `dmuonc_args`. communicator: an mpi4py communicator
    (default MPI.COMM_WORLD). mode: "z2", "z3" or a dmuon.MODE_*. Other
    keywords are runtime options (dmuon.runtime_options): lr, momentum,
    weight_decay, adamw_lr, ..., accumulation, max_grad_norm, clip_policy,
    momentum_form. Every rank calls it, with the same values."""
    if communicator is None:
        from mpi4py import MPI
        communicator = MPI.COMM_WORLD
    if plan is None:
        plan = compile_plan(model, mesh or str(communicator.Get_size()), work_dir, communicator,
                            model_name, optimizer, dmuonc_args, dmuonc)
    if not isinstance(plan, Plan):
        plan = Plan(plan)
    modes = {"z2": _capi.MODE_Z2, "z3": _capi.MODE_Z3, None: _capi.MODE_FROM_PLAN}
    if isinstance(mode, str) or mode is None:
        if mode not in modes:
            raise ValueError(f"mode must be 'z2', 'z3' or a dmuon.MODE_* value, not {mode!r}")
        mode = modes[mode]
    runtime = Runtime(plan, communicator, mode=mode, **options)
    try:
        return DmuonModel(model, plan, runtime)
    except Exception:
        runtime.close()
        raise
