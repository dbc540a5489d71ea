"""Plan and Runtime: dmuon.hpp's RAII wrapper, in Python.

Every failing call raises Error with the library's status and message
(dmuon_last_error, or dmuon_runtime_last_error for calls on a runtime), as
dmuon::Error does. The structs the library fills come back as plain Python
objects (ParamInfo, MeshInfo, ...), so nothing handed out aliases a ctypes
buffer; the param and gradient views are the exception, zero-copy by design.
"""

import ctypes
import math
import os
from collections import namedtuple

from . import _capi
from ._capi import lib

_STATUS_NAMES = {
    _capi.ERROR_INVALID_ARGUMENT: "INVALID_ARGUMENT",
    _capi.ERROR_INVALID_PLAN: "INVALID_PLAN",
    _capi.ERROR_MISMATCH: "MISMATCH",
    _capi.ERROR_INVALID_STATE: "INVALID_STATE",
    _capi.ERROR_UNSUPPORTED: "UNSUPPORTED",
    _capi.ERROR_BACKEND: "BACKEND",
    _capi.ERROR_OUT_OF_MEMORY: "OUT_OF_MEMORY",
    _capi.ERROR_IO: "IO",
    _capi.ERROR_INTERNAL: "INTERNAL",
    _capi.ERROR_NON_FINITE: "NON_FINITE",
}


class Error(RuntimeError):
    """A failed libdmuon call: `status` (a dmuon_status_t value), `status_name`
    ("INVALID_STATE") and the library's `message`."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = _STATUS_NAMES.get(self.status, str(self.status))
        self.message = message
        described = lib.dmuon_status_string(self.status).decode()
        super().__init__(f"{described}: {message}")


def _check(status):
    if status != _capi.SUCCESS:
        raise Error(status, lib.dmuon_last_error().decode(errors="replace"))


def _fields(struct, skip=("struct_size", "version")):
    return {name: getattr(struct, name) for name, _ in struct._fields_ if name not in skip}


ParamInfo = namedtuple("ParamInfo", "index name shape numel dtype role hook_group owner_rank "
                       "owner_shard owner_replicate")
ParamRoute = namedtuple("ParamRoute", "route shard_elements")
ParamSlice = namedtuple("ParamSlice", "shape offset numel")
MeshInfo = namedtuple("MeshInfo", "dim_names dim_sizes shard_dim replicate_dim num_shards "
                      "num_replicas world_size dim_carries_data data_parallel_size")
QkClipPair = namedtuple("QkClipPair", "query key query_index key_index heads key_heads head_dim")
GradNorm = namedtuple("GradNorm", "total muon adamw clip_coef finite")
ParamState = namedtuple("ParamState", "is_owner has_owned_data has_reduced_grad has_momentum "
                        "owned_checksum")
CollectiveCounts = namedtuple("CollectiveCounts", "sent received calls")
MemoryCategory = namedtuple("MemoryCategory", "live peak")


class Plan:
    """A verified plan (dmuon_plan_load_file / _buffer). Immutable; a Runtime
    keeps the library's plan alive, so this object may go first."""

    def __init__(self, source):
        """`source`: a path (str or os.PathLike) or the plan's bytes."""
        self._handle = ctypes.c_void_p()
        handle = ctypes.c_void_p()
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            _check(lib.dmuon_plan_load_buffer(data, len(data), ctypes.byref(handle)))
        else:
            _check(lib.dmuon_plan_load_file(os.fsencode(source), ctypes.byref(handle)))
        self._handle = handle
        self._infos = [self._param_info(i) for i in range(self.num_params)]
        self._index = {info.name: info.index for info in self._infos}

    def close(self):
        if self._handle:
            lib.dmuon_plan_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self):
        self.close()

    @property
    def handle(self):
        return self._handle

    @property
    def fingerprint(self):
        return lib.dmuon_plan_fingerprint(self._handle)

    @property
    def world_size(self):
        return lib.dmuon_plan_world_size(self._handle)

    @property
    def num_params(self):
        return lib.dmuon_plan_num_params(self._handle)

    @property
    def num_hook_groups(self):
        return lib.dmuon_plan_num_hook_groups(self._handle)

    def hook_group_name(self, group):
        name = lib.dmuon_plan_hook_group_name(self._handle, group)
        if name is None:
            raise IndexError(f"hook group {group} out of range (the plan has "
                             f"{self.num_hook_groups})")
        return name.decode()

    @property
    def hook_group_names(self):
        return [self.hook_group_name(g) for g in range(self.num_hook_groups)]

    def mesh(self):
        m = _capi.versioned(_capi.MeshInfo, _capi.MESH_INFO_VERSION)
        _check(lib.dmuon_plan_mesh(self._handle, ctypes.byref(m)))
        n = m.ndim
        return MeshInfo([m.dim_names[d].decode() for d in range(n)], list(m.dim_sizes[:n]),
                        m.shard_dim, m.replicate_dim, m.num_shards, m.num_replicas, m.world_size,
                        [bool(c) for c in m.dim_carries_data[:n]], m.data_parallel_size)

    def _param_info(self, index):
        p = _capi.versioned(_capi.ParamInfo, _capi.PARAM_INFO_VERSION)
        _check(lib.dmuon_plan_param_info(self._handle, index, ctypes.byref(p)))
        return ParamInfo(index, p.name.decode(), tuple(p.shape[:p.ndim]), p.numel, p.dtype,
                         p.role, p.hook_group, p.owner_rank, p.owner_shard, p.owner_replicate)

    def param(self, index_or_name):
        """ParamInfo of a param by plan index or name."""
        return self._infos[self.find_param(index_or_name)]

    @property
    def params(self):
        return list(self._infos)

    def find_param(self, index_or_name):
        if isinstance(index_or_name, int):
            if not 0 <= index_or_name < len(self._infos):
                raise IndexError(f"param index {index_or_name} out of range (the plan has "
                                 f"{len(self._infos)} params)")
            return index_or_name
        index = self._index.get(index_or_name)
        if index is None:
            # The library's own message for the unknown name.
            out = ctypes.c_int()
            _check(lib.dmuon_plan_find_param(self._handle, index_or_name.encode(),
                                             ctypes.byref(out)))
            index = out.value
        return index

    def param_route(self, param):
        r = _capi.versioned(_capi.ParamRoute, _capi.PARAM_ROUTE_VERSION)
        _check(lib.dmuon_plan_param_route(self._handle, self.find_param(param), ctypes.byref(r)))
        return ParamRoute(r.route, r.shard_elements)

    def param_slice(self, param, rank):
        s = _capi.versioned(_capi.ParamSlice, _capi.PARAM_SLICE_VERSION)
        _check(lib.dmuon_plan_param_slice(self._handle, self.find_param(param), rank,
                                          ctypes.byref(s)))
        return ParamSlice(tuple(s.shape[:s.ndim]), tuple(s.offset[:s.ndim]), s.numel)

    # Pipeline stages (docs/runtime.md, "Pipeline stages"): one stage, 0,
    # in a plan without a pp dim.
    @property
    def num_stages(self):
        return lib.dmuon_plan_num_stages(self._handle)

    def _stage(self, query, index):
        out = ctypes.c_int()
        _check(query(self._handle, index, ctypes.byref(out)))
        return out.value

    def rank_stage(self, rank):
        return self._stage(lib.dmuon_plan_rank_stage, rank)

    def param_stage(self, param):
        return self._stage(lib.dmuon_plan_param_stage, self.find_param(param))

    def hook_group_stage(self, group):
        return self._stage(lib.dmuon_plan_hook_group_stage, group)

    @property
    def num_qk_clip_pairs(self):
        return lib.dmuon_plan_num_qk_clip_pairs(self._handle)

    def qk_clip_pair(self, index):
        q = _capi.versioned(_capi.QkClipPairInfo, _capi.QK_CLIP_PAIR_INFO_VERSION)
        _check(lib.dmuon_plan_qk_clip_pair(self._handle, index, ctypes.byref(q)))
        return QkClipPair(q.query.decode(), q.key.decode(), q.query_index, q.key_index, q.heads,
                          q.key_heads, q.head_dim)

    @property
    def qk_clip_tau(self):
        return lib.dmuon_plan_qk_clip_tau(self._handle)


def _real(value, name="value"):
    """A real option: None is "unset" (the C ABI's NaN marker); a NaN the
    caller passes is an error, never taken for "unset"."""
    if value is None:
        return _capi.UNSET_REAL
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} is NaN: pass a number, or None to leave it unset")
    return value


def _flag(value):
    return _capi.UNSET if value is None else int(value)


# Runtime options by keyword: name -> how the value is written into the struct
# (None always means "unset": the plan's value).
_OPTION_SETTERS = {
    "mode": _flag, "replicate_async": _flag, "manage_adamw": int, "nesterov": _flag,
    "ns_steps": _flag, "device": _flag,
    "lr": _real, "momentum": _real, "weight_decay": _real,
    "adamw_lr": _real, "adamw_beta1": _real, "adamw_beta2": _real, "adamw_eps": _real,
    "adamw_weight_decay": _real,
    "collective_timeout_s": float, "accumulation": int, "max_grad_norm": float,
    "clip_policy": int, "momentum_form": int, "normuon_beta2": _real,
    **{name: _real for name in (
        "soap_lr", "soap_beta1", "soap_beta2", "soap_shampoo_beta", "soap_eps",
        "soap_weight_decay", "shampoo_lr", "shampoo_beta1", "shampoo_beta2", "shampoo_eps",
        "shampoo_weight_decay", "shampoo_graft_eps")},
}


def runtime_options(**options):
    """A dmuon_runtime_options_t from dmuon_runtime_options_init, with the
    options given by keyword set (names as in dmuon.h; None leaves one unset)."""
    o = _capi.options_init()
    for name, value in options.items():
        setter = _OPTION_SETTERS.get(name)
        if setter is None:
            raise TypeError(f"unknown runtime option '{name}' (known: "
                            f"{', '.join(sorted(_OPTION_SETTERS))})")
        setattr(o, name, setter(value, name) if setter is _real else setter(value))
    return o


SCHEDULED_HYPER_PARAMS = tuple(name for name, _ in _capi.HyperParams._fields_[2:])


def hyper_params_struct(**values):
    """A dmuon_hyper_params_t with the rows given set (lr, momentum,
    weight_decay, adamw_lr, adamw_weight_decay, soap_lr, soap_weight_decay,
    shampoo_lr, shampoo_weight_decay); None or absent: unchanged."""
    h = _capi.hyper_params_init()
    for name, value in values.items():
        if name not in SCHEDULED_HYPER_PARAMS:
            raise TypeError(f"unknown hyper-parameter '{name}' (known: "
                            f"{', '.join(SCHEDULED_HYPER_PARAMS)})")
        setattr(h, name, _real(value, name))
    return h


def hyper_params_dict(h):
    return {k: (None if math.isnan(v) else v) for k, v in _fields(h).items()}
