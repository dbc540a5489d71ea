"""ParamBridge: the runtime's memory becomes the module's memory
(dmuon::torch's DmuonTorch.h, hosts/torch, does the same in C++; this is its
Python twin).

- Every param is re-pointed (param.data = a tensor over the runtime's
  buffer) whenever the runtime has a view for it, and at an empty tensor
  when it has none, so a stray use outside the window fails on the shape
  instead of reading freed memory.
- Gradients are accumulated by autograd straight into the runtime's fp32
  gradient buffers: each param's .grad is a tensor over grad_view, and
  AccumulateGrad adds into a defined .grad in place.
- Hooks: pre_forward / post_forward from forward pre- and post-hooks on each
  hook group's module; pre_backward from a hook on that module's output
  tensor (it runs before any of the module's own backward); post_backward
  from hooks on the params' gradient accumulators once all of the group's
  gradients have landed (as DDP's reducer does); groups that got no gradient
  are finished by a callback the autograd engine runs at the end of backward.
  Only torch 1.13 APIs, so Debian's python3-torch works (and torch 2 too).

Z3: post_forward frees the packed buffer and pre_backward broadcasts into a
new allocation, but autograd saves tensors that alias the params (weight.t()
for a Linear's backward). C++ re-points the shared StorageImpl; Python cannot,
so a saved-tensors hook packs every saved alias of a hook-moved param as
(param, offset, size, stride) and rebuilds it from the param's memory at the
time backward unpacks it: Z2 and Z3 both work without recomputation.
"""

import torch

from .. import _capi
from .._core import Error

# A group's state within one micro-batch.
_IDLE, _IN_FORWARD, _FORWARDED, _IN_BACKWARD, _DONE = range(5)


class _Param:
    __slots__ = ("name", "index", "tensor", "group", "accumulator", "hook", "span")

    def __init__(self, name, index, tensor, group):
        self.name, self.index, self.tensor, self.group = name, index, tensor, group
        self.accumulator = None
        self.hook = None
        self.span = None  # (first byte, end) of the runtime's memory it points at, or None


class _SavedAlias:
    """A saved tensor that aliases a param: rebuilt from the param at unpack."""
    __slots__ = ("param", "offset", "size", "stride")

    def __init__(self, param, offset, size, stride):
        self.param, self.offset, self.size, self.stride = param, offset, size, stride


class ParamBridge:
    def __init__(self, runtime, plan, model):
        self.rt = runtime
        self.plan = plan
        self.model = model
        self.group_names = plan.hook_group_names
        groups = len(self.group_names)
        self.group_params = [[] for _ in range(groups)]
        self.phase = [_IDLE] * groups
        self.pending = [0] * groups
        self.params = []
        self.host_params = []  # ROUTE_HOST: the host's own; never re-pointed
        self._handles = []
        self._saved_hooks = None
        self._callback_queued = False
        self._bind(model)
        self._register_module_hooks(model)
        self.begin_forward()

    # --------------------------------------------------------- set-up

    def _bind(self, model):
        named = list(model.named_parameters())
        if len(named) != self.plan.num_params:
            raise ValueError(f"the plan has {self.plan.num_params} params, the model "
                             f"{len(named)}: compile the plan from this model")
        for name, t in named:
            index = self.plan.find_param(name)
            info = self.plan.param(index)
            local = self.rt.local_shape(index)
            if tuple(t.shape) != local:
                raise ValueError(f"param '{name}' has shape {tuple(t.shape)}, the plan's "
                                 f"(this rank's slice) is {local}")
            if t.dtype != torch.float32 or info.dtype != _capi.DTYPE_F32:
                raise ValueError(f"param '{name}' is {t.dtype}: dmuon.torch handles f32 "
                                 "params only")
            if t.device.type != "cpu":
                raise ValueError(f"param '{name}' is on {t.device}: the MPI backend's views "
                                 "are host memory")
            self.rt.bind_param(name, t)
            if self.plan.param_route(index).route == _capi.ROUTE_HOST:
                self.host_params.append(t)
                continue
            p = _Param(name, index, t, info.hook_group)
            self.params.append(p)
            if p.group >= 0:
                self.group_params[p.group].append(p)
        for p in self.params:
            if p.group >= 0 and p.tensor.requires_grad:
                # expand_as's grad_fn leads to the leaf's AccumulateGrad; it is
                # kept alive here, since a leaf holds it only weakly. Made while
                # the param has its own shape: the accumulator records it, and
                # checks every gradient against it.
                p.accumulator = p.tensor.expand_as(p.tensor).grad_fn.next_functions[0][0]
                p.hook = p.accumulator.register_hook(self._grad_hook(p.group))
            self._point_nowhere(p)  # the module's own memory is let go here

    def _grad_hook(self, group):
        return lambda grad_inputs, grad_outputs: self._on_grad_accumulated(group)

    def _register_module_hooks(self, model):
        # Root pre-hook first and root post-hook last: when a hook group is the
        # root itself, its hooks run inside the step's own.
        self._handles.append(model.register_forward_pre_hook(lambda m, a: self.begin_forward()))
        modules = dict(model.named_modules())
        for g, name in enumerate(self.group_names):
            module = modules.get(name)
            if module is None:
                owned = ", ".join(p.name for p in self.group_params[g]) or "none"
                raise ValueError(f"hook group {g} '{name}' is not a module of the model (its "
                                 f"params: {owned}): the plan's hook groups must be module "
                                 "paths (dmuonc --hook-boundary)")
            self._handles.append(module.register_forward_pre_hook(self._pre_forward_hook(g)))
            self._handles.append(module.register_forward_hook(self._post_forward_hook(g)))
        self._handles.append(model.register_forward_hook(lambda m, a, out: self._end_forward()))

    def _pre_forward_hook(self, g):
        return lambda module, args: self._pre_forward(g)

    def _post_forward_hook(self, g):
        return lambda module, args, out: self._post_forward(g, out)

    def close(self):
        """Takes every hook off the model and its params and gradients off the
        runtime's memory (they are left empty: gather_into a replica first)."""
        self._end_forward()
        for h in self._handles:
            h.remove()
        self._handles = []
        for p in self.params:
            if p.hook is not None:
                p.hook.remove()
                p.hook = None
            p.accumulator = None
            p.tensor.grad = None
            self._point_nowhere(p)

    # ---------------------------------------------------- memory moves

    def _point_nowhere(self, p):
        with torch.no_grad():
            p.tensor.data = torch.empty(0)
        p.span = None

    def _point_at_view(self, p):
        """The param reads the runtime's memory; False where the runtime has
        no view for it now (its group's window is closed)."""
        try:
            view = self.rt.param_view(p.index, "torch")
        except Error as e:
            if e.status != _capi.ERROR_INVALID_STATE:
                raise
            self._point_nowhere(p)
            return False
        with torch.no_grad():
            p.tensor.data = view
        p.span = (view.data_ptr(), view.data_ptr() + view.numel() * view.element_size())
        return True

    def _refresh_group(self, g):
        for p in self.group_params[g]:
            self._point_at_view(p)

    def _attach_grad(self, p):
        p.tensor.grad = self.rt.grad_view(p.index, "torch")

    # ----------------------------------------------------------- steps

    def begin_forward(self):
        """The start of a micro-batch's forward: the always-valid params and
        their gradients re-pointed, every group idle, saved-tensor packing on."""
        if not torch.is_grad_enabled():
            raise RuntimeError("dmuon.torch: a forward without grad through the wrapped model "
                               "would open hook windows that no backward closes; evaluate a "
                               "replica filled by gather_into() instead")
        for p in self.params:
            if p.group < 0:
                self._point_at_view(p)
                if p.tensor.requires_grad:
                    self._attach_grad(p)
        self.phase = [_IDLE] * len(self.phase)
        self._callback_queued = False
        if self._saved_hooks is None:
            self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            self._saved_hooks.__enter__()

    def _end_forward(self):
        if self._saved_hooks is not None:
            hooks, self._saved_hooks = self._saved_hooks, None
            hooks.__exit__(None, None, None)

    def _pre_forward(self, g):
        self.rt.pre_forward(g)
        self._refresh_group(g)
        self.phase[g] = _IN_FORWARD

    def _post_forward(self, g, out):
        self.rt.post_forward(g)
        self._refresh_group(g)  # Z3: nothing until pre_backward; Z2: unchanged
        self.phase[g] = _FORWARDED
        # An output that needs no grad gets no hook: end_backward opens and
        # closes its group's backward.
        for t in _tensors(out):
            if t.requires_grad:
                t.register_hook(lambda grad, g=g: self._on_pre_backward(g))
        return None

    def _on_pre_backward(self, g):
        if self.phase[g] != _FORWARDED:
            return  # a module with several outputs: the first gradient to arrive opens it
        if not self._callback_queued:
            torch.autograd.Variable._execution_engine.queue_callback(self.end_backward)
            self._callback_queued = True
        self.rt.pre_backward(g)
        self._refresh_group(g)  # Z3: the new allocation; saved aliases follow at unpack
        waiting = 0
        for p in self.group_params[g]:
            if p.tensor.requires_grad:
                self._attach_grad(p)
                waiting += 1
        self.pending[g] = waiting
        self.phase[g] = _IN_BACKWARD

    def _on_grad_accumulated(self, g):
        if self.phase[g] != _IN_BACKWARD:
            return
        self.pending[g] -= 1
        if self.pending[g] <= 0:
            self._post_backward(g)

    def _post_backward(self, g):
        self.rt.post_backward(g)
        # The gradient buffer now belongs to the reduce and the packed buffer
        # is gone (both modes): no tensor may keep pointing at either.
        for p in self.group_params[g]:
            p.tensor.grad = None
        self._refresh_group(g)
        self.phase[g] = _DONE

    def end_backward(self):
        """post_backward for the groups autograd did not finish (params that
        got no gradient), in backward order. Runs by itself at the end of
        every backward that reached a hook group; idempotent."""
        for g in reversed(range(len(self.phase))):
            if self.phase[g] == _FORWARDED:
                self._on_pre_backward(g)  # its output did not reach the loss
            if self.phase[g] == _IN_BACKWARD:
                self._post_backward(g)

    # ---------------------------------------------------- saved tensors

    def _pack(self, t):
        if t.dtype != torch.float32 or t.device.type != "cpu" or t.numel() == 0:
            return t
        address = t.data_ptr()
        for g, phase in enumerate(self.phase):
            if phase not in (_IN_FORWARD, _FORWARDED):
                continue
            for p in self.group_params[g]:
                if p.span is not None and p.span[0] <= address < p.span[1]:
                    return _SavedAlias(p, (address - p.span[0]) // 4, tuple(t.shape), t.stride())
        return t

    @staticmethod
    def _unpack(saved):
        if isinstance(saved, _SavedAlias):
            base = saved.param.tensor.detach()
            if base.numel() == 0:
                raise RuntimeError(f"dmuon.torch: backward needs param '{saved.param.name}' "
                                   "outside its hook group's window (was pre_backward missed?)")
            return base.as_strided(saved.size, saved.stride, saved.offset)
        return saved


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for o in out:
            yield from _tensors(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from _tensors(o)
