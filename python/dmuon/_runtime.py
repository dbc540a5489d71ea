"""Runtime: one rank's executor of a plan (dmuon_runtime_t), as dmuon::Runtime.

Views (param_view, grad_view) are zero-copy NumPy arrays or torch tensors over
the runtime's own memory. They are valid exactly as long as the C ABI says
(docs/runtime.md, "Lifecycle"): a Muon param's between its hook group's
pre_forward and post_forward, its gradient's between pre_backward and
post_backward; the runtime may free or reuse the memory afterwards, and a
view kept past its window reads whatever is there.
"""

import atexit
import ctypes
import os
import weakref

from . import _capi
from ._capi import lib
from ._core import (CollectiveCounts, Error, GradNorm, MemoryCategory, ParamState, _check,
                    hyper_params_dict, hyper_params_struct, runtime_options)

_NUMPY_DTYPES = {_capi.DTYPE_F32: "float32", _capi.DTYPE_F16: "float16",
                 _capi.DTYPE_F64: "float64", _capi.DTYPE_BF16: "uint16"}  # bf16: raw bits
_ITEM_SIZES = {_capi.DTYPE_F32: 4, _capi.DTYPE_F16: 2, _capi.DTYPE_F64: 8, _capi.DTYPE_BF16: 2}


# Runtimes still open at interpreter exit are destroyed before mpi4py
# finalizes MPI: destroying a runtime frees its MPI communicators. atexit runs
# handlers last-registered first, so ours is registered once a runtime exists,
# which is after mpi4py.MPI registered its own at import.
_open_runtimes = weakref.WeakSet()
_exit_handler_registered = False


def _close_open_runtimes():
    for rt in list(_open_runtimes):
        rt.close(_at_exit=True)


def _track(runtime):
    global _exit_handler_registered
    if not _exit_handler_registered:
        atexit.register(_close_open_runtimes)
        _exit_handler_registered = True
    _open_runtimes.add(runtime)


def communicator_address(communicator):
    """(address of the MPI_Comm handle, this rank) for the C ABI's
    options.communicator, which is a pointer to an MPI_Comm. `communicator` is
    an mpi4py communicator; the handle lives inside that Python object, which
    the caller keeps alive while the runtime is created (the runtime
    duplicates it)."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError("dmuon: an MPI communicator needs mpi4py "
                          "(Debian: apt-get install python3-mpi4py)") from e
    if not isinstance(communicator, MPI.Comm):
        raise TypeError(f"communicator must be an mpi4py MPI.Comm, not "
                        f"{type(communicator).__name__}")
    return MPI._addressof(communicator), communicator.Get_rank()


class _SingleProcess:
    """The communicator of a process alone (options.communicator = NULL: the
    runtime uses MPI_COMM_SELF and initializes MPI itself if the host did
    not), for a host at world size 1 with no MPI of its own (torchrun)."""

    def __repr__(self):
        return "dmuon.SINGLE_PROCESS"


SINGLE_PROCESS = _SingleProcess()


class Runtime:
    """dmuon_runtime_create over `plan` with `communicator` (an mpi4py
    communicator, or SINGLE_PROCESS for this process alone without mpi4py,
    for the MPI backend; for NCCL a dmuon.nccl.NcclCommunicator,
    or the integer address of a variable holding an ncclComm_t with rank=,
    and stream= given). Keyword options are
    dmuon_runtime_options_t's fields (dmuon.runtime_options); those not given
    take the plan's values. Collective over the communicator."""

    def __init__(self, plan, communicator=None, *, rank=None, backend=_capi.BACKEND_MPI,
                 stream=None, **options):
        self._handle = ctypes.c_void_p()
        self.plan = plan
        o = runtime_options(**options)
        o.backend = backend
        if backend == _capi.BACKEND_MPI and communicator is SINGLE_PROCESS:
            address, comm_rank = None, 0  # NULL: MPI_COMM_SELF
            self._communicator = None
        elif backend == _capi.BACKEND_MPI:
            if communicator is None:
                from mpi4py import MPI
                communicator = MPI.COMM_WORLD
            address, comm_rank = communicator_address(communicator)
            self._communicator = communicator  # its handle's address is in `o`
        else:
            from .nccl import NcclCommunicator
            if isinstance(communicator, NcclCommunicator):
                address, comm_rank = communicator.address, communicator.rank
                self._communicator = communicator  # destroyed after this runtime
                communicator._add_runtime(self)
            elif isinstance(communicator, int) and rank is not None:
                address, comm_rank = communicator, rank
            else:
                raise TypeError("the NCCL backend takes a dmuon.nccl.NcclCommunicator, or the "
                                "address of an ncclComm_t variable (an int) and rank=")
            if not isinstance(stream, int) or not stream:
                raise TypeError("the NCCL backend takes stream=, the host's compute "
                                "cudaStream_t as an int (torch.cuda.current_stream()."
                                f"cuda_stream), not {stream!r}")
            o.stream = stream
        if rank is not None and rank != comm_rank:
            raise ValueError(f"rank={rank} but the communicator says {comm_rank}")
        self.rank = comm_rank
        self.options = o
        handle = ctypes.c_void_p()
        # The address of the handle variable: a pointer to an MPI_Comm (or
        # to an ncclComm_t), as options.communicator is.
        o.communicator = address
        _check(lib.dmuon_runtime_create(plan.handle, ctypes.byref(o), ctypes.byref(handle)))
        self._handle = handle
        self._live_views = 0
        self._local = {}
        _track(self)

    def close(self, _at_exit=False):
        """dmuon_runtime_destroy. Refused while a view of its memory lives
        (a param_view or grad_view array or tensor, or one made from it):
        it would read freed memory. A view also keeps its Runtime from being
        garbage-collected."""
        if not self._handle:
            return
        if self._live_views and not _at_exit:
            import gc
            gc.collect()  # views in reference cycles
        if self._live_views and not _at_exit:
            raise Error(_capi.ERROR_INVALID_STATE,
                        f"Runtime.close(): {self._live_views} view(s) of its memory "
                        "(param_view / grad_view) are still alive; delete them (or copy what "
                        "you need) first: after close they would read freed memory")
        lib.dmuon_runtime_destroy(self._handle)
        self._handle = ctypes.c_void_p()

    def __del__(self):
        if getattr(self, "_handle", None):
            self.close(_at_exit=True)  # no view is alive: each keeps its Runtime

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def handle(self):
        return self._handle

    def _call(self, status):
        if status != _capi.SUCCESS:
            raise Error(status, lib.dmuon_runtime_last_error(self._handle).decode(errors="replace"))

    def local_shape(self, param):
        """This rank's shape of a param (its slice for one sharded on
        model-parallel dims): what bind_param takes and the views have."""
        index = self.plan.find_param(param)
        if index not in self._local:
            self._local[index] = self.plan.param_slice(index, self.rank).shape
        return self._local[index]

    # ------------------------------------------------------------ params

    def bind_param(self, name, values):
        """Binds a param's initial fp32 values: a NumPy array or a CPU torch
        tensor (made contiguous fp32 here), of the param's local numel."""
        array = _as_f32_array(values, name)
        self._call(lib.dmuon_runtime_bind_param(self._handle, name.encode(), array.ctypes.data,
                                                array.size))

    def param_view_address(self, param):
        out = ctypes.c_void_p()
        self._call(lib.dmuon_runtime_param_view(self._handle, param, ctypes.byref(out)))
        return out.value

    def grad_view_address(self, param):
        out = ctypes.c_void_p()
        self._call(lib.dmuon_runtime_grad_view(self._handle, param, ctypes.byref(out)))
        return out.value

    def param_view(self, param, kind="numpy"):
        """The param's values in the plan's dtype, zero-copy: a NumPy array
        (bf16 as its raw uint16 bits) or, with kind="torch", a torch tensor
        of host memory; with kind="cuda" (the NCCL backend, whose views are
        device pointers) a CUDA tensor on options.device."""
        index = self.plan.find_param(param)
        dtype = self.plan.param(index).dtype
        return _view(self, self.param_view_address(index), self.local_shape(index), dtype, kind)

    def grad_view(self, param, kind="numpy"):
        """The fp32 gradient buffer the host accumulates into, zero-copy."""
        index = self.plan.find_param(param)
        return _view(self, self.grad_view_address(index), self.local_shape(index),
                     _capi.DTYPE_F32, kind)

    # ------------------------------------------------------------- hooks

    def pre_forward(self, group):
        self._call(lib.dmuon_runtime_pre_forward(self._handle, group))

    def post_forward(self, group):
        self._call(lib.dmuon_runtime_post_forward(self._handle, group))

    def pre_backward(self, group):
        self._call(lib.dmuon_runtime_pre_backward(self._handle, group))

    def post_backward(self, group):
        self._call(lib.dmuon_runtime_post_backward(self._handle, group))

    def finish_backward(self):
        self._call(lib.dmuon_runtime_finish_backward(self._handle))

    def step(self):
        """True when applied, False when skipped for a non-finite gradient
        (DMUON_STEP_SKIPPED: nothing changed); raises on errors."""
        status = lib.dmuon_runtime_step(self._handle)
        if status == _capi.STEP_SKIPPED:
            return False
        self._call(status)
        return True

    def abandon_step(self):
        """Collective: drops this step's gradients and hook state (after an
        exception in forward or backward); nothing is applied."""
        self._call(lib.dmuon_runtime_abandon_step(self._handle))

    def synchronize(self):
        self._call(lib.dmuon_runtime_synchronize(self._handle))

    # ----------------------------------------------------- training loop

    def begin_micro_batch(self, is_last):
        self._call(lib.dmuon_runtime_begin_micro_batch(self._handle, int(bool(is_last))))

    def set_hyper_params(self, **values):
        """Collective: lr, momentum, weight_decay, adamw_lr,
        adamw_weight_decay; those not given (or None) stay as they are."""
        h = hyper_params_struct(**values)
        self._call(lib.dmuon_runtime_set_hyper_params(self._handle, ctypes.byref(h)))

    def hyper_params(self):
        h = _capi.hyper_params_init()
        self._call(lib.dmuon_runtime_get_hyper_params(self._handle, ctypes.byref(h)))
        return hyper_params_dict(h)

    def set_param_group_scale(self, pattern, lr_scale, weight_decay_scale):
        self._call(lib.dmuon_runtime_set_param_group_scale(self._handle, pattern.encode(),
                                                           lr_scale, weight_decay_scale))

    def grad_norm(self):
        n = _capi.versioned(_capi.GradNorm, _capi.GRAD_NORM_VERSION)
        self._call(lib.dmuon_runtime_grad_norm(self._handle, ctypes.byref(n)))
        return GradNorm(n.total, n.muon, n.adamw, n.clip_coef, bool(n.finite))

    def step_counts(self):
        """(applied, skipped)"""
        applied, skipped = ctypes.c_int64(), ctypes.c_int64()
        self._call(lib.dmuon_runtime_step_counts(self._handle, ctypes.byref(applied),
                                                 ctypes.byref(skipped)))
        return applied.value, skipped.value

    def gather_param(self, name):
        """This rank's fp32 values of a param as the optimizer sees them, a
        new NumPy array (a collective over the data-parallel group)."""
        import numpy as np
        out = np.empty(self.local_shape(name), dtype=np.float32)
        self._call(lib.dmuon_runtime_gather_param(self._handle, name.encode(), out.ctypes.data,
                                                  out.size))
        return out

    def set_qk_max_logits(self, pair, max_logits):
        array = _as_f32_array(max_logits, f"QK-Clip pair {pair}")
        self._call(lib.dmuon_runtime_set_qk_max_logits(self._handle, pair, array.ctypes.data,
                                                       array.size))

    def qk_clip_counts(self):
        """(heads clipped by the last step, in total)"""
        last, total = ctypes.c_int64(), ctypes.c_int64()
        self._call(lib.dmuon_runtime_qk_clip_counts(self._handle, ctypes.byref(last),
                                                    ctypes.byref(total)))
        return last.value, total.value

    # ------------------------------------------------------- checkpoints

    def save_checkpoint(self, path, step):
        self._call(lib.dmuon_checkpoint_save(self._handle, os.fsencode(path), step))

    def load_checkpoint(self, path):
        """Restores a checkpoint (binding every param); returns its step."""
        step = ctypes.c_int64()
        self._call(lib.dmuon_checkpoint_load(self._handle, os.fsencode(path), ctypes.byref(step)))
        return step.value

    # ----------------------------------------------------- introspection

    def param_state(self, name):
        s = _capi.versioned(_capi.ParamState, _capi.PARAM_STATE_VERSION)
        self._call(lib.dmuon_runtime_param_state(self._handle, name.encode(), ctypes.byref(s)))
        return ParamState(bool(s.is_owner), bool(s.has_owned_data), bool(s.has_reduced_grad),
                          bool(s.has_momentum), s.owned_checksum)

    def comm_counters(self):
        """{collective kind: CollectiveCounts} since creation or the last reset."""
        return self._counters(lib.dmuon_runtime_comm_counters)

    def planned_counters(self):
        return self._counters(lib.dmuon_runtime_planned_counters)

    def reset_comm_counters(self):
        self._call(lib.dmuon_runtime_reset_comm_counters(self._handle))

    def memory(self):
        """{category: MemoryCategory(live, peak)} in bytes."""
        return self._memory(lib.dmuon_runtime_memory)

    def planned_memory(self):
        return self._memory(lib.dmuon_runtime_planned_memory)

    def ns_flops(self):
        return lib.dmuon_runtime_ns_flops(self._handle)

    def _counters(self, get):
        c = _capi.versioned(_capi.CommCounters, _capi.COMM_COUNTERS_VERSION)
        self._call(get(self._handle, ctypes.byref(c)))
        return {kind: CollectiveCounts(k.sent, k.received, k.calls)
                for kind, k in zip(_capi.COLLECTIVES, c.kinds)}

    def _memory(self, get):
        m = _capi.versioned(_capi.MemoryReport, _capi.MEMORY_REPORT_VERSION)
        self._call(get(self._handle, ctypes.byref(m)))
        return {name: MemoryCategory(getattr(m, name).live, getattr(m, name).peak)
                for name, _ in _capi.MemoryReport._fields_[2:]}


def _as_f32_array(values, what):
    """A contiguous fp32 NumPy array of `values` (a copy only when needed)."""
    import numpy as np
    if hasattr(values, "detach"):  # a torch tensor
        if values.device.type != "cpu":
            raise ValueError(f"{what}: the values must be on the CPU, not {values.device}")
        if values.is_complex():
            raise TypeError(f"{what}: complex values ({values.dtype}); a param is real")
        values = values.detach().contiguous().float().numpy()
    if np.iscomplexobj(values):
        raise TypeError(f"{what}: complex values ({np.asarray(values).dtype}); a param is real")
    return np.ascontiguousarray(values, dtype=np.float32)


class _ViewKeeper:
    """Rides on the buffer object under every view: keeps its Runtime alive
    (no garbage collection frees memory a view reads) and counts the live
    views, which close() refuses to leave dangling."""
    __slots__ = ("runtime", "__weakref__")

    def __init__(self, runtime):
        self.runtime = runtime
        runtime._live_views += 1

    def __del__(self):
        self.runtime._live_views -= 1


def _view(runtime, address, shape, dtype, kind):
    import numpy as np
    if kind not in ("numpy", "torch", "cuda"):
        raise ValueError(f"kind must be 'numpy', 'torch' or 'cuda', not {kind!r}")
    if kind == "cuda":
        from ._cuda_view import cuda_view
        return cuda_view(address, shape, dtype, runtime.options.device, _ViewKeeper(runtime))
    if runtime.options.backend != _capi.BACKEND_MPI:
        raise ValueError(f"a {kind} view is of host memory; the NCCL backend's views are device "
                         "pointers: ask for kind='cuda'")
    numel = 1
    for n in shape:
        numel *= n
    nbytes = numel * _ITEM_SIZES[dtype]
    if kind == "torch" and numel == 0:
        import torch
        return torch.empty(shape, dtype=_torch_dtype(dtype))
    buffer = (ctypes.c_char * nbytes).from_address(address)
    buffer._dmuon_keeper = _ViewKeeper(runtime)  # numpy and torch keep the buffer
    if kind == "numpy":
        return np.frombuffer(buffer, dtype=_NUMPY_DTYPES[dtype]).reshape(shape)
    import torch
    return torch.frombuffer(buffer, dtype=_torch_dtype(dtype)).view(shape)


def _torch_dtype(dtype):
    import torch
    return {_capi.DTYPE_F32: torch.float32, _capi.DTYPE_F16: torch.float16,
            _capi.DTYPE_F64: torch.float64, _capi.DTYPE_BF16: torch.bfloat16}[dtype]
