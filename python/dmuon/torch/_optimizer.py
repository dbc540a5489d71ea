"""DmuonOptimizer: what wrap() returns, a torch.optim.Optimizer over the
runtime, so that a training script's optimizer lines (zero_grad, step,
param_groups under torch.optim.lr_scheduler, state_dict/load_state_dict)
stay as they are (docs/python.md, "A torch training loop").

param_groups: one for the matrices (named by their rule: "muon", "soap",
...) and one "adamw" for the rest, each with the rows the runtime can change
between steps (lr, weight_decay; the Muon rules' momentum too). step() sends
what a scheduler (or the script) changed to the runtime, collectively, before
it steps. Fixed rows (AdamW's betas and eps) are shown and refused if changed.
"""

import os
import shutil
import tempfile

import torch

from .. import _capi
from .._core import Error

# Group key -> hyper-parameter row, per rule; the rows that may change.
_SCHEDULED_ROWS = {
    "muon": {"lr": "lr", "momentum": "momentum", "weight_decay": "weight_decay"},
    "normuon": {"lr": "lr", "momentum": "momentum", "weight_decay": "weight_decay"},
    "soap": {"lr": "soap_lr", "weight_decay": "soap_weight_decay"},
    "shampoo": {"lr": "shampoo_lr", "weight_decay": "shampoo_weight_decay"},
    "adamw": {"lr": "adamw_lr", "weight_decay": "adamw_weight_decay"},
}
_CHECKPOINT_FILE = "checkpoint"


def _runtime_call(what, call, *args, **kwargs):
    """A runtime call made for a Python one: its refusal names `what`."""
    try:
        return call(*args, **kwargs)
    except Error as e:
        raise RuntimeError(f"dmuon.torch: {what}: {e.message}") from None


class DmuonOptimizer(torch.optim.Optimizer):
    """The runtime, the bridge and the optimizer of one wrapped model."""

    def __init__(self, model, plan, runtime, bridge, group, matrix_rule, fixed, device=None):
        from ._device import CpuDevice
        from ._launch import as_group
        self.model, self.plan, self.runtime, self.bridge = model, plan, runtime, bridge
        # The launch's process group (_launch.py) and the device layer
        # (_device.py): state_dict gathers over the one, close() ends the other.
        self.group = as_group(group)
        self.device = device or CpuDevice()
        self.matrix_rule = matrix_rule
        self._steps = 0
        self.last_step_applied = None
        values = runtime.hyper_params()
        matrices, others = [], []
        for p in bridge.params:
            (matrices if plan.param(p.index).role == _capi.ROLE_MUON else others).append(p.tensor)
        groups = []
        for rule, params in ((matrix_rule, matrices), ("adamw", others)):
            if not params:
                continue
            group = {"params": params, "name": rule}
            group.update({key: values[row] for key, row in _SCHEDULED_ROWS[rule].items()})
            if rule == "adamw":
                group["betas"] = (fixed["adamw_beta1"], fixed["adamw_beta2"])
                group["eps"] = fixed["adamw_eps"]
            groups.append(group)
        if not groups:
            raise ValueError("dmuon.torch: the model has no trainable param the runtime steps")
        # 'momentum' in the defaults lets OneCycleLR cycle it (on the Muon
        # rules; AdamW has no momentum row, and its beta1 is fixed).
        defaults = {"lr": groups[0]["lr"]}
        if "momentum" in _SCHEDULED_ROWS[matrix_rule]:
            defaults["momentum"] = values["momentum"]
        super().__init__(groups, defaults)
        self._applied = [self._group_values(g) for g in self.param_groups]

    # ----------------------------------------------------- hyper-params

    @staticmethod
    def _group_values(group):
        keys = list(_SCHEDULED_ROWS[group["name"]]) + [k for k in ("betas", "eps") if k in group]
        return {k: group[k] for k in keys}

    def _send_hyper_params(self):
        """The rows the scheduler or the script changed, to the runtime
        (collective: every rank changes the same ones)."""
        changed = {}
        for group, applied in zip(self.param_groups, self._applied):
            rows = _SCHEDULED_ROWS[group["name"]]
            for key, old in applied.items():
                new = group[key]
                if new == old:
                    continue
                if key not in rows:
                    raise ValueError(f"param_groups['{group['name']}']['{key}'] is fixed for the "
                                     f"run (it was {old!r}, now {new!r}); set it in wrap()")
                changed[rows[key]] = new
        if changed:
            _runtime_call("step() setting " + ", ".join(sorted(changed)),
                          self.runtime.set_hyper_params, **changed)
            self._applied = [self._group_values(g) for g in self.param_groups]

    def set_hyper_params(self, **values):
        """Collective: the runtime's rows by name (lr, momentum, weight_decay,
        adamw_lr, ..., soap_lr, ...) from the next step; None: unchanged.
        param_groups follow."""
        _runtime_call("set_hyper_params()", self.runtime.set_hyper_params, **values)
        self._sync_groups()

    def _sync_groups(self):
        values = self.runtime.hyper_params()
        for group in self.param_groups:
            for key, row in _SCHEDULED_ROWS[group["name"]].items():
                group[key] = values[row]
        self._applied = [self._group_values(g) for g in self.param_groups]

    def hyper_params(self):
        return self.runtime.hyper_params()

    @property
    def communicator(self):
        """The mpi4py communicator of an MPI launch, else None."""
        return getattr(self.group, "communicator", None)

    # ------------------------------------------------------------ steps

    @property
    def host_params(self):
        """Params the plan routes to the host (frozen params, ROUTE_HOST): not
        the runtime's; it neither steps nor holds them."""
        return list(self.bridge.host_params)

    def begin_micro_batch(self, is_last):
        """Before a micro-batch's forward: is_last=False for every micro-batch
        of a step but the last (scale the loss by 1/k, as with torch)."""
        _runtime_call("begin_micro_batch()", self.runtime.begin_micro_batch, is_last)

    @torch.no_grad()
    def step(self, closure=None):
        """Finishes the backward (groups whose gradients did not all arrive)
        and steps. Returns the closure's loss when given one, else True when
        applied and False when skipped for a non-finite gradient (nothing
        changed; also last_step_applied)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        waiting = self.bridge.waiting_for_backward()
        if waiting and not self.bridge.backward_started():
            g = waiting[0]
            raise RuntimeError(f"dmuon.torch: step() after a forward with no loss.backward() "
                               f"(hook group {g} '{self.bridge.group_names[g]}' got no "
                               "gradient): call loss.backward() before step()")
        self._send_hyper_params()
        self.bridge.end_backward()
        self.last_step_applied = _runtime_call("step()", self.runtime.step)
        self.bridge.step_open = False
        self._steps += 1
        return loss if closure is not None else self.last_step_applied

    def abandon_step(self):
        """Collective: gives up the current step after an exception in
        forward or backward (a bad batch, out of memory) or a refused call:
        every gradient of the step is dropped, nothing is applied, and the
        next forward starts the step again.

            try:
                loss_fn(model(x), y).backward()
                opt.step()
            except RuntimeError:
                opt.abandon_step()   # every rank, then go on
        """
        _runtime_call("abandon_step()", self.runtime.abandon_step)
        self.bridge.abandon()

    def zero_grad(self, set_to_none=True):
        """The runtime's gradients need no zeroing: each step's land in
        buffers it zeroes itself. Host-routed params' (a frozen param has
        none) are cleared as torch.optim does."""
        for t in self.bridge.host_params:
            if t.grad is not None:
                if set_to_none:
                    t.grad = None
                else:
                    t.grad.detach_().zero_()

    def grad_norm(self):
        return self.runtime.grad_norm()

    def set_qk_max_logits(self, pair, max_logits):
        """This rank's per-head maximum attention logits of QK-Clip pair `pair`
        for the coming step (a tensor or array of the pair's heads)."""
        self.runtime.set_qk_max_logits(pair, max_logits)

    def qk_clip_counts(self):
        return self.runtime.qk_clip_counts()

    # ------------------------------------------------------------ values

    def model_state_dict(self):
        """{name: tensor} of every param's current values, every name of a
        tied param included (a collective), on the model's device. Frozen
        params are the module's."""
        out = {}
        for p in self.bridge.params:
            value = torch.from_numpy(_runtime_call("model_state_dict()",
                                                   self.runtime.gather_param, p.name))
            value = value.to(self.device.torch_device)
            for name in [p.name] + p.aliases:
                out[name] = value
        host = {id(t) for t in self.bridge.host_params}
        for name, t in self.model.named_parameters():
            if id(t) in host:
                out[name] = t.detach().clone()
        return out

    def gather_into(self, copy):
        """Copies every param's current values (the optimizer's fp32 master)
        into the same-named params of `copy` (an evaluation replica).
        Collective: every rank calls it, between steps."""
        named = dict(copy.named_parameters())
        values = self.model_state_dict()
        with torch.no_grad():
            for name, value in values.items():
                dst = named.get(name)
                if dst is None:
                    continue  # a tied alias the copy lists under its first name
                if not dst.is_floating_point() or tuple(dst.shape) != tuple(value.shape):
                    raise ValueError(f"gather_into: the copy has no param '{name}' of "
                                     f"shape {tuple(value.shape)}")
                dst.copy_(value)
        return copy

    # ------------------------------------------------------ checkpoints

    def save_checkpoint(self, path, step):
        _runtime_call(f"save_checkpoint({path!r})", self.runtime.save_checkpoint, path, step)

    def load_checkpoint(self, path):
        step = _runtime_call(f"load_checkpoint({path!r})", self.runtime.load_checkpoint, path)
        self._sync_groups()
        return step

    def state_dict(self):
        """The whole training state, as FSDP's full state dict: every
        param's fp32 master and every rule's state (a libdmuon checkpoint's
        files, gathered on every rank), the param groups' rows and the step.
        Collective. load_state_dict() restores it on any mesh."""
        files = {}
        with tempfile.TemporaryDirectory(prefix="dmuon-state-") as tmp:
            self.save_checkpoint(tmp, self._steps)
            for name in os.listdir(tmp):
                if name == _CHECKPOINT_FILE or name.endswith(".dmck"):
                    with open(os.path.join(tmp, name), "rb") as f:
                        files[name] = f.read()
        if self.group is not None and self.group.world_size > 1:
            merged = {}
            for part in self.group.all_gather_object(files):
                merged.update(part)
            files = merged
        groups = [{k: v for k, v in g.items() if k != "params"} for g in self.param_groups]
        index = 0
        for g, src in zip(groups, self.param_groups):
            g["params"] = list(range(index, index + len(src["params"])))
            index += len(src["params"])
        return {"state": {}, "param_groups": groups,
                "dmuon": {"step": self._steps, "checkpoint": files}}

    def load_state_dict(self, state_dict):
        """Restores what state_dict() returned, here or on another mesh
        (collective; every rank passes the same dict)."""
        saved = state_dict.get("dmuon") if isinstance(state_dict, dict) else None
        if not saved or _CHECKPOINT_FILE not in saved.get("checkpoint", {}):
            raise ValueError("load_state_dict: not a dmuon.torch state_dict (it has no "
                             "'dmuon' checkpoint); load a torch.optim state into a torch "
                             "optimizer")
        tmp = tempfile.mkdtemp(prefix="dmuon-state-")
        try:
            for name, data in saved["checkpoint"].items():
                if os.path.basename(name) != name:
                    raise ValueError(f"load_state_dict: file name {name!r} in the state")
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(data)
            self._steps = self.load_checkpoint(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        by_name = {g["name"]: g for g in state_dict["param_groups"]}
        for group in self.param_groups:
            old = by_name.get(group["name"])
            if old is not None:
                group.update({k: v for k, v in old.items() if k not in ("params", "name")})
        self._send_hyper_params()

    def close(self):
        """Collective: gives every param its current values back in memory
        of its own, unhooks the model and destroys the runtime; the module
        then trains or evaluates on its own."""
        if self.runtime.handle and self.bridge.step_open:
            self.abandon_step()  # a step left half done: its gradients go
        values = self.model_state_dict() if self.runtime.handle else {}
        self.bridge.close()
        self.runtime.close()
        self.device.close()  # the NCCL communicator, after the runtime made over it
        with torch.no_grad():
            for name, t in self.model.named_parameters():
                if name in values:
                    t.data = values[name].to(t.dtype, copy=True)
