"""dmuon from Python: the C ABI of libdmuon (include/dmuon/dmuon.h) through
ctypes, with no compile step.

    import dmuon
    plan = dmuon.Plan("gpt-2x2.plan")
    rt = dmuon.Runtime(plan, MPI.COMM_WORLD, mode=dmuon.MODE_Z3)

Plan and Runtime mirror dmuon.hpp; failures raise dmuon.Error with the
library's status and message. dmuon.torch runs a torch.nn.Module through
the runtime (docs/python.md).
"""

from ._capi import (ACCUMULATION_LOCAL, ACCUMULATION_REDUCE, BACKEND_MPI, BACKEND_NCCL,
                    CLIP_ADAMW_ONLY, CLIP_ALL, CLIP_NONE, COLLECTIVES, DTYPE_BF16, DTYPE_F16,
                    DTYPE_F32, DTYPE_F64, ERROR_BACKEND, ERROR_INTERNAL, ERROR_INVALID_ARGUMENT,
                    ERROR_INVALID_PLAN, ERROR_INVALID_STATE, ERROR_IO, ERROR_MISMATCH,
                    ERROR_NON_FINITE, ERROR_OUT_OF_MEMORY, ERROR_UNSUPPORTED, MODE_FROM_PLAN, MODE_Z2, MODE_Z3,
                    MOMENTUM_EMA, MOMENTUM_SGD, ROLE_ADAMW, ROLE_MUON, ROUTE_HOST, ROUTE_OWNER,
                    ROUTE_REPLICATED, ROUTE_SHARDED, STEP_SKIPPED, SUCCESS, UNSET, UNSET_REAL,
                    library_path, plan_format_version)
from ._capi import version as library_version
from ._core import Error, Plan, runtime_options
from ._runtime import SINGLE_PROCESS, Runtime, communicator_address
from . import nccl  # dmuon.nccl: NCCL communicators for GPU hosts

__version__ = "%d.%d.%d" % library_version()


def version_string():
    """What `python3 -m dmuon --version` prints."""
    major, minor, patch = library_version()
    fmajor, fminor = plan_format_version()
    return (f"dmuon {major}.{minor}.{patch} (libdmuon {library_path}), "
            f"plan format {fmajor}.{fminor}")
