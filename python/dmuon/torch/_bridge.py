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

- The root module's own params (a ViT's cls_token, pos_embed) are the hook
  group '<root>': the model's own forward pre- and post-hooks drive it, so
  its window spans the whole forward (and its backward the whole backward).
- A tied param (one tensor under several names: an embedding shared with the
  output head) is one param of the plan, under its first name. Its group's
  window opens at whichever use comes first and closes at the end of the
  forward; backward opens it at whichever use's output gradient arrives
  first, and the single gradient accumulator (autograd sums both uses) closes
  it.
- Between a group's windows its params hold no memory: each reads as NaN
  (a stride-0 view of one NaN, never a silent 0) and any write to it fails.

Z3: post_forward frees the packed buffer and pre_backward broadcasts into a
new allocation, but autograd saves tensors that alias the params (weight.t()
for a Linear's backward). C++ re-points the shared StorageImpl; Python cannot,
so a saved-tensors hook packs every saved alias of a hook-moved param as
(param, offset, size, stride) and rebuilds it from the param's memory at the
time backward unpacks it: Z2 and Z3 both work without recomputation.
"""

import bisect
import functools
import time

import torch

from .. import _capi
from .._core import Error

# A group's state within one micro-batch.
_IDLE, _IN_FORWARD, _FORWARDED, _IN_BACKWARD, _DONE = range(5)


class _Param:
    __slots__ = ("name", "index", "tensor", "group", "accumulator", "hook", "span", "aliases")

    def __init__(self, name, index, tensor, group):
        self.name, self.index, self.tensor, self.group = name, index, tensor, group
        self.aliases = []  # the other names of a tied param
        self.accumulator = None
        self.hook = None
        self.span = None  # (first byte, end) of the runtime's memory it points at, or None


class _SavedAlias:
    """A saved tensor that aliases a param: rebuilt from the param at unpack."""
    __slots__ = ("param", "offset", "size", "stride")

    def __init__(self, param, offset, size, stride):
        self.param, self.offset, self.size, self.stride = param, offset, size, stride


ROOT_GROUP = "<root>"  # dmuonc's name for the hook group of the root module's own params


def names_by_param(model):
    """{id(param): every name it has}, the first being named_parameters()'s
    (the plan's): a tied param has several."""
    names = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for local, p in module._parameters.items():
            if p is not None:
                full = f"{prefix}.{local}" if prefix else local
                if full not in names.setdefault(id(p), []):
                    names[id(p)].append(full)
    return names


def _module_path(param_name):
    return param_name.rpartition(".")[0]


def _inside(path, module):
    """Whether the module at `path` is `module` or inside it ('' is the root)."""
    return module == "" or path == module or path.startswith(module + ".")


def _timed(method):
    """Counts the wall time of a hook callback in hook_seconds (the outermost
    one only, so nested callbacks are counted once)."""
    @functools.wraps(method)
    def timed(self, *args, **kwargs):
        if self._timing_depth:
            return method(self, *args, **kwargs)
        self._timing_depth = 1
        start = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.hook_seconds += time.perf_counter() - start
            self._timing_depth = 0
    return timed


class ParamBridge:
    """hook_seconds: wall time in the bridge's hook callbacks (forward and
    backward hooks, saved-tensor packing) since it was made; runtime_seconds:
    the part spent inside the runtime's hook calls. Their difference is the
    Python overhead a step pays for the hooks."""

    def __init__(self, runtime, plan, model, device=None):
        from ._device import CpuDevice
        self.rt = runtime
        # The device layer (_device.py): which views the params are re-pointed
        # at (host or CUDA) and where a param with no memory points.
        self.device = device or CpuDevice()
        self.plan = plan
        self.model = model
        self.group_names = plan.hook_group_names
        groups = len(self.group_names)
        self.group_params = [[] for _ in range(groups)]
        self.phase = [_IDLE] * groups
        self.pending = [0] * groups
        self.params = []
        self.host_params = []  # ROUTE_HOST (frozen params among them): never re-pointed
        self.tied_uses = [set() for _ in range(groups)]  # modules outside g using its tied params
        self._hooked_paths = [None] * groups
        self._handles = []
        self._saved_hooks = None
        self._callback_queued = False
        self.hook_seconds = self.runtime_seconds = 0.0
        self.step_open = False  # a forward ran since the last step
        self._spans_dirty, self._span_starts, self._span_params = True, [], []
        self._timing_depth = 0
        self._bind(model)
        self._register_module_hooks(model)
        self.begin_forward()
        self.step_open = False

    # --------------------------------------------------------- set-up

    def _bind(self, model):
        named = list(model.named_parameters())
        if len(named) != self.plan.num_params:
            raise ValueError(f"the plan has {self.plan.num_params} params, the model "
                             f"{len(named)}: compile the plan from this model")
        all_names = names_by_param(model)
        for name, t in named:
            try:
                index = self.plan.find_param(name)
            except Error:
                raise ValueError(f"param '{name}' is not in the plan: compile the plan from "
                                 "this model") from None
            info = self.plan.param(index)
            local = self.rt.local_shape(index)
            if tuple(t.shape) != local:
                raise ValueError(f"param '{name}' has shape {tuple(t.shape)}, the plan's "
                                 f"(this rank's slice) is {local}")
            check_param_tensor(name, t)
            if _PLAN_DTYPES[t.dtype] != info.dtype:
                raise ValueError(f"param '{name}' is {t.dtype} but planned as another dtype: "
                                 "compile the plan from this model")
            self.rt.bind_param(name, t.detach().cpu())  # bind_param reads host memory
            if self.plan.param_route(index).route == _capi.ROUTE_HOST:
                self.host_params.append(t)
                continue
            p = _Param(name, index, t, info.hook_group)
            p.aliases = all_names[id(t)][1:]
            self.params.append(p)
            if p.group >= 0:
                self.group_params[p.group].append(p)
                own = self._group_path(p.group)
                for alias in p.aliases:
                    if not _inside(_module_path(alias), own):
                        self.tied_uses[p.group].add(_module_path(alias))
        for p in self.params:
            if p.group >= 0 and p.tensor.requires_grad:
                # expand_as's grad_fn leads to the leaf's AccumulateGrad; it is
                # kept alive here, since a leaf holds it only weakly. Made while
                # the param has its own shape: the accumulator records it, and
                # checks every gradient against it.
                p.accumulator = p.tensor.expand_as(p.tensor).grad_fn.next_functions[0][0]
                p.hook = p.accumulator.register_hook(self._grad_hook(p.group))
            self._point_nowhere(p)  # the module's own memory is let go here

    def _group_path(self, g):
        name = self.group_names[g]
        return "" if name == ROOT_GROUP else name

    @staticmethod
    def _callable_path(path, modules):
        """The module whose forward hooks drive a group at `path`: the
        module itself, or for a ParameterList/ParameterDict (never called:
        the model reads its params) the nearest ancestor that is not one."""
        containers = (torch.nn.ParameterList, torch.nn.ParameterDict)
        while path and isinstance(modules.get(path), containers):
            path = path.rpartition(".")[0]
        return path

    def _grad_hook(self, group):
        return lambda grad_inputs, grad_outputs: self._on_grad_accumulated(group)

    def _register_module_hooks(self, model):
        # Root pre-hook first and root post-hook last: the root's own group
        # ('<root>') and the tied windows nest inside the forward's.
        self._handles.append(model.register_forward_pre_hook(lambda m, a: self.begin_forward()))
        # Every path of a module shared under several names.
        modules = dict(model.named_modules(remove_duplicate=False))
        for g in range(len(self.group_names)):
            self._hooked_paths[g] = self._callable_path(self._group_path(g), modules)
            module = modules.get(self._hooked_paths[g])
            if module is None:
                owned = ", ".join(p.name for p in self.group_params[g]) or "none"
                raise ValueError(f"hook group {g} '{self.group_names[g]}' is not a module of the "
                                 f"model (its params: {owned}): the plan's hook groups must be "
                                 "module paths (dmuonc --hook-boundary)")
            hooked = [module]
            own = self._hooked_paths[g]
            for path in [own] + sorted(self.tied_uses[g]):
                use = modules[path]
                if use is module and path != own or any(use is h for h in hooked[1:]):
                    continue  # the same module under another name: hooked once
                if path != own:
                    hooked.append(use)
                self._handles.append(use.register_forward_pre_hook(self._pre_forward_hook(g)))
                self._handles.append(use.register_forward_hook(self._post_forward_hook(g)))
        self._handles.append(model.register_forward_hook(lambda m, a, out: self._end_forward()))

    def _pre_forward_hook(self, g):
        return lambda module, args: self._pre_forward(g)

    def _post_forward_hook(self, g):
        return lambda module, args, out: self._post_forward(g, out)

    def close(self):
        """Takes every hook off the model and its params and gradients off the
        runtime's memory (they read NaN: gather_into a replica first)."""
        self._exit_saved_hooks()
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
        # One NaN of its own, seen through the param's shape with stride 0:
        # no memory, a read is NaN, a write fails.
        with torch.no_grad():
            p.tensor.data = torch.full((), float("nan"), dtype=p.tensor.dtype,
                                       device=self.device.torch_device).expand(p.tensor.shape)
        p.span = None

    def _point_at_view(self, p):
        """The param reads the runtime's memory; False where the runtime has
        no view for it now (its group's window is closed)."""
        try:
            view = self.rt.param_view(p.index, self.device.view_kind)
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
        self._spans_dirty = True

    def _attach_grad(self, p):
        """The param's .grad: the runtime's fp32 buffer itself for an f32
        param; for bf16/f16 a gradient of the param's own dtype (autograd
        accumulates in it), added into the fp32 buffer by _flush_grad."""
        if p.tensor.dtype == torch.float32:
            p.tensor.grad = self.rt.grad_view(p.index, self.device.view_kind)
        else:
            p.tensor.grad = torch.zeros_like(p.tensor)

    def _flush_grad(self, p):
        """A low-precision param's gradient of this backward into the
        runtime's fp32 buffer (which holds the step's earlier micro-batches'),
        the cast the runtime makes on reduce for its own buffers."""
        if p.tensor.dtype == torch.float32 or p.tensor.grad is None:
            return
        self.rt.grad_view(p.index, self.device.view_kind).add_(p.tensor.grad.float())
        p.tensor.grad.zero_()

    def _hook(self, call, g, what):
        """A runtime hook, its refusal told in the host's terms."""
        start = time.perf_counter()
        try:
            call(g)
        except Error as e:
            raise RuntimeError(f"dmuon.torch: {what} of hook group {g} "
                               f"'{self.group_names[g]}': {e.message}") from None
        finally:
            self.runtime_seconds += time.perf_counter() - start

    # ----------------------------------------------------------- steps

    def abandon(self):
        """After the runtime abandoned the step: every group idle, every
        param and gradient off the runtime's memory, saved-tensor packing
        off; the next forward starts the step again."""
        self._exit_saved_hooks()
        self._callback_queued = False
        for p in self.params:
            p.tensor.grad = None
            if p.group >= 0:
                self._point_nowhere(p)
        self.phase = [_IDLE] * len(self.phase)
        self.pending = [0] * len(self.phase)
        self._spans_dirty = True
        self.step_open = False

    def waiting_for_backward(self):
        """The groups a forward opened that no backward has reached."""
        return [g for g, ph in enumerate(self.phase) if ph in (_IN_FORWARD, _FORWARDED)]

    def backward_started(self):
        return any(ph in (_IN_BACKWARD, _DONE) for ph in self.phase)

    @_timed
    def begin_forward(self):
        """The start of a micro-batch's forward: the always-valid params and
        their gradients re-pointed, every group idle, saved-tensor packing on."""
        if not torch.is_grad_enabled():
            raise RuntimeError("dmuon.torch: a forward without grad through the wrapped model "
                               "would open hook windows that no backward closes; evaluate a "
                               "replica filled by gather_into() instead")
        waiting = self.waiting_for_backward()
        if waiting and not self.backward_started():
            g = waiting[0]
            raise RuntimeError(f"dmuon.torch: model(...) called again before loss.backward() "
                               f"of its previous forward (hook group {g} '{self.group_names[g]}' "
                               "still waits for its backward): call loss.backward() on each "
                               "forward's loss, then step()")
        for p in self.params:
            if p.group < 0:
                self._point_at_view(p)
                if p.tensor.requires_grad:
                    self._attach_grad(p)
        self.phase = [_IDLE] * len(self.phase)
        self._spans_dirty = True
        self._callback_queued = False
        self.step_open = True
        if self._saved_hooks is None:
            self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            self._saved_hooks.__enter__()

    def _exit_saved_hooks(self):
        if self._saved_hooks is not None:
            hooks, self._saved_hooks = self._saved_hooks, None
            hooks.__exit__(None, None, None)

    @_timed
    def _end_forward(self):
        self._exit_saved_hooks()
        # A group whose module did not run in this forward (a branch not
        # taken): the step still needs its hooks, and its backward gets no
        # gradient (end_backward closes it), on every rank alike, as DDP's
        # find_unused_parameters does.
        for g, phase in enumerate(self.phase):
            if phase == _IDLE:
                self._pre_forward(g)
                self._post_forward(g, None)
        # A tied param's window closes only here: every use has run.
        for g, uses in enumerate(self.tied_uses):
            if uses and self.phase[g] == _IN_FORWARD:
                self._hook(self.rt.post_forward, g, "the end of forward")
                self._refresh_group(g)
                self.phase[g] = _FORWARDED

    @_timed
    def _pre_forward(self, g):
        if self.phase[g] != _IDLE and self.tied_uses[g]:
            return  # a tied param's second use: its window is open
        self._hook(self.rt.pre_forward, g, "forward")
        self._refresh_group(g)
        self.phase[g] = _IN_FORWARD

    @_timed
    def _post_forward(self, g, out):
        if not self.tied_uses[g]:
            self._hook(self.rt.post_forward, g, "the end of forward")
            self._refresh_group(g)  # Z3: nothing until pre_backward; Z2: unchanged
            self.phase[g] = _FORWARDED
        # An output that needs no grad gets no hook: end_backward opens and
        # closes its group's backward.
        for t in _tensors(out):
            if t.requires_grad:
                t.register_hook(lambda grad, g=g: self._on_pre_backward(g))
        return None

    @_timed
    def _on_pre_backward(self, g, in_engine=True):
        if self.phase[g] != _FORWARDED:
            return  # a module with several outputs: the first gradient to arrive opens it
        if in_engine and not self._callback_queued:
            torch.autograd.Variable._execution_engine.queue_callback(self.end_backward)
            self._callback_queued = True
        self._hook(self.rt.pre_backward, g, "backward")
        self._refresh_group(g)  # Z3: the new allocation; saved aliases follow at unpack
        waiting = 0
        for p in self.group_params[g]:
            if p.tensor.requires_grad:
                self._attach_grad(p)
                waiting += 1
        self.pending[g] = waiting
        self.phase[g] = _IN_BACKWARD

    @_timed
    def _on_grad_accumulated(self, g):
        if self.phase[g] != _IN_BACKWARD:
            return
        self.pending[g] -= 1
        if self.pending[g] <= 0:
            self._post_backward(g)

    def _post_backward(self, g):
        for p in self.group_params[g]:
            self._flush_grad(p)
        self._hook(self.rt.post_backward, g, "the end of backward")
        # The gradient buffer now belongs to the reduce and the packed buffer
        # is gone (both modes): no tensor may keep pointing at either.
        for p in self.group_params[g]:
            p.tensor.grad = None
        self._refresh_group(g)
        self.phase[g] = _DONE

    @_timed
    def end_backward(self):
        """post_backward for the groups autograd did not finish (params that
        got no gradient), in backward order. Runs by itself at the end of
        every backward that reached a hook group (and from step()); idempotent."""
        in_engine = self._callback_queued
        for p in self.params:
            if p.group < 0:
                self._flush_grad(p)
        for g in reversed(range(len(self.phase))):
            if self.phase[g] == _FORWARDED:
                self._on_pre_backward(g, in_engine=False)  # its output did not reach the loss
            if self.phase[g] == _IN_BACKWARD:
                self._post_backward(g)
        if in_engine:
            self._callback_queued = False

    # ---------------------------------------------------- saved tensors

    @_timed
    def _pack(self, t):
        if t.dtype not in _PLAN_DTYPES or t.device.type != self.device.type or t.numel() == 0:
            return t
        if self._spans_dirty:
            self._index_spans()
        address = t.data_ptr()
        i = bisect.bisect_right(self._span_starts, address) - 1
        if i >= 0:
            p = self._span_params[i]
            if address < p.span[1] and t.dtype == p.tensor.dtype:
                offset = (address - p.span[0]) // t.element_size()
                return _SavedAlias(p, offset, tuple(t.shape), t.stride())
        return t

    def _index_spans(self):
        """The spans of the params a forward may save aliases of (those of
        groups in or after their forward), sorted for _pack's bisection;
        rebuilt once after each window change, not per saved tensor."""
        live = sorted((p.span[0], id(p), p) for g, phase in enumerate(self.phase)
                      if phase in (_IN_FORWARD, _FORWARDED)
                      for p in self.group_params[g] if p.span is not None)
        self._span_starts = [start for start, _, _ in live]
        self._span_params = [p for _, _, p in live]
        self._spans_dirty = False

    @staticmethod
    def _unpack(saved):
        if isinstance(saved, _SavedAlias):
            if saved.param.span is None:
                raise RuntimeError(f"dmuon.torch: backward needs param '{saved.param.name}' "
                                   "outside its hook group's window (was pre_backward missed?)")
            base = saved.param.tensor.detach()
            return base.as_strided(saved.size, saved.stride, saved.offset)
        return saved


# The param dtypes dmuon.torch trains (the runtime keeps fp32 masters and
# state for each; forward and backward run in the param's own dtype).
_PLAN_DTYPES = {torch.float32: _capi.DTYPE_F32, torch.bfloat16: _capi.DTYPE_BF16,
                torch.float16: _capi.DTYPE_F16}


def check_param_tensor(name, t):
    """What dmuon.torch trains: f32, bf16 or f16 params in CPU or CUDA
    memory; anything else is refused naming the param and what to do."""
    if t.dtype not in _PLAN_DTYPES:
        hint = "call model.float() (or model.bfloat16()) before wrap()" \
            if t.dtype == torch.float64 else "convert it to torch.float32 or torch.bfloat16"
        raise TypeError(f"param '{name}' is {t.dtype}: dmuon.torch trains f32, bf16 and f16 "
                        f"params (the optimizer keeps fp32 masters); {hint}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"param '{name}' is on {t.device}: dmuon.torch trains CPU tensors (the "
                         "MPI backend) or CUDA tensors (the NCCL backend); move the model to "
                         "one of them")


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for o in out:
            yield from _tensors(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from _tensors(o)
