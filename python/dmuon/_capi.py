"""The C ABI of include/dmuon/dmuon.h through ctypes: the library, its structs
and the prototypes of every function the package calls.

The structs mirror the header field for field; ctypes lays them out with the C
compiler's rules, and test/python/test_binding.py checks every size against
the C compiler's sizeof. Constants are the header's, spelled the same.
"""

import ctypes
import ctypes.util
import os

from . import _paths

# ------------------------------------------------------------ constants

SUCCESS = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_INVALID_PLAN = 2
ERROR_MISMATCH = 3
ERROR_INVALID_STATE = 4
ERROR_UNSUPPORTED = 5
ERROR_BACKEND = 6
ERROR_OUT_OF_MEMORY = 7
ERROR_IO = 8
ERROR_INTERNAL = 9
ERROR_NON_FINITE = 10
STEP_SKIPPED = 64

UNSET = -1
UNSET_REAL = float("nan")

MAX_MESH_DIMS = 8
MAX_DIMS = 8
NCCL_UNIQUE_ID_BYTES = 128

ROLE_ADAMW, ROLE_MUON = 0, 1
DTYPE_F32, DTYPE_BF16, DTYPE_F16, DTYPE_F64 = 0, 1, 2, 3
ROUTE_REPLICATED, ROUTE_OWNER, ROUTE_SHARDED, ROUTE_HOST = 0, 1, 2, 3
BACKEND_MPI, BACKEND_NCCL = 1, 2
MODE_FROM_PLAN, MODE_Z3, MODE_Z2 = UNSET, 0, 1
ACCUMULATION_LOCAL, ACCUMULATION_REDUCE = 0, 1
CLIP_ADAMW_ONLY, CLIP_ALL, CLIP_NONE = 0, 1, 2
MOMENTUM_SGD, MOMENTUM_EMA = 0, 1

COLLECTIVES = ("broadcast", "reduce", "replicate", "allreduce", "gather", "scatter",
               "allgather", "reduce_scatter")
COLLECTIVE_COUNT = len(COLLECTIVES)

MESH_INFO_VERSION = 1
PARAM_INFO_VERSION = 1
PARAM_ROUTE_VERSION = 1
PARAM_SLICE_VERSION = 1
RUNTIME_OPTIONS_VERSION = 4
HYPER_PARAMS_VERSION = 2
GRAD_NORM_VERSION = 1
QK_CLIP_PAIR_INFO_VERSION = 1
PARAM_STATE_VERSION = 1
COMM_COUNTERS_VERSION = 1
MEMORY_REPORT_VERSION = 1

# -------------------------------------------------------------- structs

_size_t, _u32, _i64, _u64 = ctypes.c_size_t, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64
_int, _double, _str, _ptr = ctypes.c_int, ctypes.c_double, ctypes.c_char_p, ctypes.c_void_p
_HEADER = [("struct_size", _size_t), ("version", _u32)]


class MeshInfo(ctypes.Structure):
    _fields_ = _HEADER + [
        ("ndim", _int),
        ("dim_names", _str * MAX_MESH_DIMS),
        ("dim_sizes", _int * MAX_MESH_DIMS),
        ("shard_dim", _int),
        ("replicate_dim", _int),
        ("num_shards", _int),
        ("num_replicas", _int),
        ("world_size", _int),
        ("dim_carries_data", _int * MAX_MESH_DIMS),
        ("data_parallel_size", _i64),
    ]


class ParamInfo(ctypes.Structure):
    _fields_ = _HEADER + [
        ("name", _str),
        ("ndim", _int),
        ("shape", _i64 * MAX_DIMS),
        ("numel", _i64),
        ("dtype", _int),
        ("role", _int),
        ("hook_group", _int),
        ("owner_rank", _int),
        ("owner_shard", _int),
        ("owner_replicate", _int),
    ]


class ParamRoute(ctypes.Structure):
    _fields_ = _HEADER + [("route", _int), ("shard_elements", _i64)]


class ParamSlice(ctypes.Structure):
    _fields_ = _HEADER + [
        ("ndim", _int),
        ("shape", _i64 * MAX_DIMS),
        ("offset", _i64 * MAX_DIMS),
        ("numel", _i64),
    ]


class RuntimeOptions(ctypes.Structure):
    _fields_ = _HEADER + [
        ("backend", _int),
        ("communicator", _ptr),
        ("stream", _ptr),
        ("device", _int),
        ("mode", _int),
        ("replicate_async", _int),
        ("manage_adamw", _int),
        ("lr", _double),
        ("momentum", _double),
        ("weight_decay", _double),
        ("nesterov", _int),
        ("ns_steps", _int),
        ("adamw_lr", _double),
        ("adamw_beta1", _double),
        ("adamw_beta2", _double),
        ("adamw_eps", _double),
        ("adamw_weight_decay", _double),
        ("collective_timeout_s", _double),
        # Version 2.
        ("accumulation", _int),
        ("max_grad_norm", _double),
        ("clip_policy", _int),
        ("momentum_form", _int),
        # Version 3.
        ("normuon_beta2", _double),
        # Version 4.
    ] + [(name, _double) for name in (
        "soap_lr", "soap_beta1", "soap_beta2", "soap_shampoo_beta", "soap_eps",
        "soap_weight_decay", "shampoo_lr", "shampoo_beta1", "shampoo_beta2", "shampoo_eps",
        "shampoo_weight_decay", "shampoo_graft_eps")]


class HyperParams(ctypes.Structure):
    _fields_ = _HEADER + [
        ("lr", _double),
        ("momentum", _double),
        ("weight_decay", _double),
        ("adamw_lr", _double),
        ("adamw_weight_decay", _double),
        ("soap_lr", _double),
        ("soap_weight_decay", _double),
        ("shampoo_lr", _double),
        ("shampoo_weight_decay", _double),
    ]


class GradNorm(ctypes.Structure):
    _fields_ = _HEADER + [
        ("total", _double),
        ("muon", _double),
        ("adamw", _double),
        ("clip_coef", _double),
        ("finite", _int),
    ]


class QkClipPairInfo(ctypes.Structure):
    _fields_ = _HEADER + [
        ("query", _str),
        ("key", _str),
        ("query_index", _int),
        ("key_index", _int),
        ("heads", _int),
        ("key_heads", _int),
        ("head_dim", _int),
    ]


class ParamState(ctypes.Structure):
    _fields_ = _HEADER + [
        ("is_owner", _int),
        ("has_owned_data", _int),
        ("has_reduced_grad", _int),
        ("has_momentum", _int),
        ("owned_checksum", _u64),
    ]


class CollectiveCounts(ctypes.Structure):
    _fields_ = [("sent", _u64), ("received", _u64), ("calls", _u64)]


class CommCounters(ctypes.Structure):
    _fields_ = _HEADER + [("kinds", CollectiveCounts * COLLECTIVE_COUNT)]


class MemoryCategory(ctypes.Structure):
    _fields_ = [("live", _u64), ("peak", _u64)]


class MemoryReport(ctypes.Structure):
    _fields_ = _HEADER + [
        ("masters", MemoryCategory),
        ("momentum", MemoryCategory),
        ("values", MemoryCategory),
        ("adam_moments", MemoryCategory),
        ("grads", MemoryCategory),
        ("buffers", MemoryCategory),
    ]


def versioned(struct_type, version):
    """An output struct with struct_size and version set, as the C ABI asks."""
    out = struct_type()
    out.struct_size = ctypes.sizeof(struct_type)
    out.version = version
    return out


# Every struct the library fills or reads, with its version: what the size
# test compares with the C compiler's sizeof.
VERSIONED_STRUCTS = {
    "dmuon_mesh_info_t": (MeshInfo, MESH_INFO_VERSION),
    "dmuon_param_info_t": (ParamInfo, PARAM_INFO_VERSION),
    "dmuon_param_route_t": (ParamRoute, PARAM_ROUTE_VERSION),
    "dmuon_param_slice_t": (ParamSlice, PARAM_SLICE_VERSION),
    "dmuon_runtime_options_t": (RuntimeOptions, RUNTIME_OPTIONS_VERSION),
    "dmuon_hyper_params_t": (HyperParams, HYPER_PARAMS_VERSION),
    "dmuon_grad_norm_t": (GradNorm, GRAD_NORM_VERSION),
    "dmuon_qk_clip_pair_info_t": (QkClipPairInfo, QK_CLIP_PAIR_INFO_VERSION),
    "dmuon_param_state_t": (ParamState, PARAM_STATE_VERSION),
    "dmuon_comm_counters_t": (CommCounters, COMM_COUNTERS_VERSION),
    "dmuon_memory_report_t": (MemoryReport, MEMORY_REPORT_VERSION),
}

# ---------------------------------------------------------- the library

_P = ctypes.POINTER
_Plan = ctypes.c_void_p
_Runtime = ctypes.c_void_p
_status = ctypes.c_int

# name: (restype, argtypes)
_PROTOTYPES = {
    "dmuon_status_string": (_str, [_status]),
    "dmuon_last_error": (_str, []),
    "dmuon_version": (None, [_P(_int), _P(_int), _P(_int)]),
    "dmuon_plan_format_version": (None, [_P(_int), _P(_int)]),
    "dmuon_plan_load_file": (_status, [_str, _P(_Plan)]),
    "dmuon_plan_load_buffer": (_status, [_ptr, _size_t, _P(_Plan)]),
    "dmuon_plan_destroy": (None, [_Plan]),
    "dmuon_plan_fingerprint": (_u64, [_Plan]),
    "dmuon_plan_world_size": (_int, [_Plan]),
    "dmuon_plan_num_params": (_int, [_Plan]),
    "dmuon_plan_num_hook_groups": (_int, [_Plan]),
    "dmuon_plan_hook_group_name": (_str, [_Plan, _int]),
    "dmuon_plan_mesh": (_status, [_Plan, _P(MeshInfo)]),
    "dmuon_plan_param_info": (_status, [_Plan, _int, _P(ParamInfo)]),
    "dmuon_plan_param_route": (_status, [_Plan, _int, _P(ParamRoute)]),
    "dmuon_plan_param_slice": (_status, [_Plan, _int, _int, _P(ParamSlice)]),
    "dmuon_plan_find_param": (_status, [_Plan, _str, _P(_int)]),
    "dmuon_plan_num_stages": (_int, [_Plan]),
    "dmuon_plan_rank_stage": (_status, [_Plan, _int, _P(_int)]),
    "dmuon_plan_param_stage": (_status, [_Plan, _int, _P(_int)]),
    "dmuon_plan_hook_group_stage": (_status, [_Plan, _int, _P(_int)]),
    "dmuon_plan_num_qk_clip_pairs": (_int, [_Plan]),
    "dmuon_plan_qk_clip_pair": (_status, [_Plan, _int, _P(QkClipPairInfo)]),
    "dmuon_plan_qk_clip_tau": (_double, [_Plan]),
    "dmuon_runtime_options_init": (None, [_ptr]),
    "dmuon_runtime_create": (_status, [_Plan, _P(RuntimeOptions), _P(_Runtime)]),
    "dmuon_runtime_destroy": (None, [_Runtime]),
    "dmuon_runtime_last_error": (_str, [_Runtime]),
    "dmuon_runtime_bind_param": (_status, [_Runtime, _str, _ptr, _i64]),
    "dmuon_runtime_param_view": (_status, [_Runtime, _int, _P(_ptr)]),
    "dmuon_runtime_grad_view": (_status, [_Runtime, _int, _P(_ptr)]),
    "dmuon_runtime_pre_forward": (_status, [_Runtime, _int]),
    "dmuon_runtime_post_forward": (_status, [_Runtime, _int]),
    "dmuon_runtime_pre_backward": (_status, [_Runtime, _int]),
    "dmuon_runtime_post_backward": (_status, [_Runtime, _int]),
    "dmuon_runtime_finish_backward": (_status, [_Runtime]),
    "dmuon_runtime_abandon_step": (_status, [_Runtime]),
    "dmuon_runtime_step": (_status, [_Runtime]),
    "dmuon_runtime_synchronize": (_status, [_Runtime]),
    "dmuon_runtime_begin_micro_batch": (_status, [_Runtime, _int]),
    "dmuon_hyper_params_init": (None, [_ptr]),
    "dmuon_runtime_set_hyper_params": (_status, [_Runtime, _P(HyperParams)]),
    "dmuon_runtime_get_hyper_params": (_status, [_Runtime, _P(HyperParams)]),
    "dmuon_runtime_set_param_group_scale": (_status, [_Runtime, _str, _double, _double]),
    "dmuon_runtime_grad_norm": (_status, [_Runtime, _P(GradNorm)]),
    "dmuon_runtime_step_counts": (_status, [_Runtime, _P(_i64), _P(_i64)]),
    "dmuon_runtime_gather_param": (_status, [_Runtime, _str, _ptr, _i64]),
    "dmuon_runtime_set_qk_max_logits": (_status, [_Runtime, _int, _ptr, _i64]),
    "dmuon_runtime_qk_clip_counts": (_status, [_Runtime, _P(_i64), _P(_i64)]),
    "dmuon_checkpoint_save": (_status, [_Runtime, _str, _i64]),
    "dmuon_checkpoint_load": (_status, [_Runtime, _str, _P(_i64)]),
    "dmuon_runtime_param_state": (_status, [_Runtime, _str, _P(ParamState)]),
    "dmuon_runtime_comm_counters": (_status, [_Runtime, _P(CommCounters)]),
    "dmuon_runtime_reset_comm_counters": (_status, [_Runtime]),
    "dmuon_runtime_planned_counters": (_status, [_Runtime, _P(CommCounters)]),
    "dmuon_runtime_memory": (_status, [_Runtime, _P(MemoryReport)]),
    "dmuon_runtime_planned_memory": (_status, [_Runtime, _P(MemoryReport)]),
    "dmuon_runtime_ns_flops": (_double, [_Runtime]),
    "dmuon_nccl_unique_id": (_status, [_ptr, _size_t]),
    "dmuon_nccl_comm_init_rank": (_status, [_ptr, _int, _ptr, _size_t, _int, _int]),
    "dmuon_nccl_comm_destroy": (_status, [_ptr]),
}


def _candidates():
    """Where libdmuon.so may be, in the order tried, with why each is tried."""
    env = os.environ.get("DMUON_LIBRARY")
    if env:
        return [(env, "DMUON_LIBRARY")]
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    if _paths.LIBRARY_RELATIVE:
        found.append((os.path.normpath(os.path.join(here, _paths.LIBRARY_RELATIVE)),
                      "beside the installed package"))
    if _paths.LIBRARY_ABSOLUTE:
        found.append((_paths.LIBRARY_ABSOLUTE, "where the package was built or installed for"))
    # Last, the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache).
    found.append((ctypes.util.find_library("dmuon") or "libdmuon.so", "the loader's search path"))
    return found


def _load():
    tried = []
    for path, why in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} ({why}): no such file")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({why}): {e}")
            continue
        missing = [name for name in _PROTOTYPES if not hasattr(lib, name)]
        if missing:
            tried.append(f"{path} ({why}): too old, it lacks {', '.join(missing[:3])}")
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        return lib, path
    raise ImportError("dmuon: cannot load libdmuon.so; tried:\n  " + "\n  ".join(tried) +
                      "\nset DMUON_LIBRARY to the library's path")


lib, library_path = _load()


def options_init():
    """dmuon_runtime_options_init into a RuntimeOptions.

    The library writes its own sizeof, which may be larger than this package's
    struct (a newer library): it initializes a buffer big enough for any
    version, and the fields this package knows are taken from there. The
    struct then says this package's size and version, which every newer
    library accepts.
    """
    return _init_struct(lib.dmuon_runtime_options_init, RuntimeOptions, RUNTIME_OPTIONS_VERSION,
                        "dmuon_runtime_options_t")


def hyper_params_init():
    """dmuon_hyper_params_init into a HyperParams (as options_init)."""
    return _init_struct(lib.dmuon_hyper_params_init, HyperParams, HYPER_PARAMS_VERSION,
                        "dmuon_hyper_params_t")


def _init_struct(init, struct_type, version, c_name):
    room = ctypes.create_string_buffer(max(4096, ctypes.sizeof(struct_type)))
    init(room)
    written = ctypes.c_size_t.from_buffer(room).value
    if written < ctypes.sizeof(struct_type):
        raise ImportError(f"dmuon: {library_path} writes a {written}-byte {c_name}, "
                          f"this package expects {ctypes.sizeof(struct_type)} (version {version}): "
                          "the library is older than the package")
    out = struct_type.from_buffer_copy(room.raw[:ctypes.sizeof(struct_type)])
    out.struct_size = ctypes.sizeof(struct_type)
    out.version = version
    return out


def version():
    major, minor, patch = _int(), _int(), _int()
    lib.dmuon_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    return major.value, minor.value, patch.value


def plan_format_version():
    major, minor = _int(), _int()
    lib.dmuon_plan_format_version(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value
