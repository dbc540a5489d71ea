"""NCCL communicators for Python hosts on GPUs, with no NCCL binding of their own.

The runtime's NCCL backend takes the host's world ncclComm_t. A C++ host makes
one with ncclGetUniqueId on rank 0, a broadcast of the id, and
ncclCommInitRank on every rank; this module does the same through libdmuon's
NCCL plugin (dmuon_nccl_unique_id, dmuon_nccl_comm_init_rank in dmuon.h),
with the id broadcast over mpi4py or over a torch.distributed store
(TCPStore, FileStore, HashStore: rank 0 sets a key, the others wait for it):

    comm = dmuon.nccl.communicator(rank, world_size, store=store, device=local_rank)
    rt = dmuon.Runtime(plan, comm, backend=dmuon.BACKEND_NCCL,
                       stream=torch.cuda.current_stream().cuda_stream)
    ...
    rt.close(); comm.close()

Without CUDA and NCCL (a build without the plugin) the calls raise
dmuon.Error with status ERROR_UNSUPPORTED; on a machine without a GPU,
ERROR_BACKEND.
"""

import ctypes
import weakref

from . import _capi
from ._capi import lib
from ._core import Error, _check

UNIQUE_ID_BYTES = _capi.NCCL_UNIQUE_ID_BYTES
DEFAULT_KEY = "dmuon/nccl-unique-id"


def unique_id():
    """A new NCCL unique id (ncclGetUniqueId), UNIQUE_ID_BYTES bytes: made on
    one rank, then sent to every rank of the communicator."""
    buffer = ctypes.create_string_buffer(UNIQUE_ID_BYTES)
    _check(lib.dmuon_nccl_unique_id(buffer, UNIQUE_ID_BYTES))
    return buffer.raw


def _checked_id(value, source):
    if not isinstance(value, (bytes, bytearray)) or len(value) != UNIQUE_ID_BYTES:
        what = f"{len(value)} bytes" if isinstance(value, (bytes, bytearray)) else \
            type(value).__name__
        raise ValueError(f"the NCCL unique id from {source} is {what}, not the "
                         f"{UNIQUE_ID_BYTES} bytes of an ncclUniqueId")
    return bytes(value)


# What rank 0 sends: a tag byte, then the id or the message of its failure,
# so that every rank raises rank 0's error instead of waiting for an id.
_ID, _FAILED = b"I", b"E"


def _made_on_rank0(make):
    try:
        return _ID + _checked_id(make(), "rank 0's unique_id()")
    except Error as e:
        return _FAILED + f"{e.status}:{e.message}".encode()
    except ValueError as e:
        return _FAILED + f"{_capi.ERROR_INVALID_ARGUMENT}:{e}".encode()


def _unpacked(message, source):
    if isinstance(message, bytearray):
        message = bytes(message)
    if not isinstance(message, bytes) or message[:1] not in (_ID, _FAILED):
        raise ValueError(f"{source} holds no NCCL unique id from dmuon.nccl: "
                         f"{repr(message)[:40]}")
    if message[:1] == _FAILED:
        status, _, text = message[1:].decode(errors="replace").partition(":")
        raise Error(int(status), f"rank 0 could not make the NCCL unique id: {text}")
    return _checked_id(message[1:], source)


def broadcast_unique_id(rank, *, mpi=None, store=None, key=DEFAULT_KEY, make=unique_id):
    """The NCCL unique id of rank 0, on every rank: rank 0 calls make()
    (unique_id) and sends the id over exactly one of `mpi` (an mpi4py
    communicator: a broadcast, collective) or `store` (a torch.distributed
    Store: rank 0 sets `key`, the other ranks wait for it within the store's
    timeout). Use a new key for every communicator made over one store. If
    rank 0 fails, every rank raises its error."""
    if (mpi is None) == (store is None):
        raise TypeError("broadcast_unique_id takes exactly one of mpi= (an mpi4py "
                        "communicator) or store= (a torch.distributed Store)")
    if not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be an int >= 0, not {rank!r}")
    if mpi is not None:
        if rank != mpi.Get_rank():
            raise ValueError(f"rank={rank} but the mpi4py communicator says {mpi.Get_rank()}")
        message = mpi.bcast(_made_on_rank0(make) if rank == 0 else None, root=0)
        return _unpacked(message, "the MPI broadcast")
    if rank == 0:
        message = _made_on_rank0(make)
        store.set(key, message)
    else:
        message = store.get(key)
    return _unpacked(message, f"the store's key {key!r}")


class NcclCommunicator:
    """A world ncclComm_t made with dmuon_nccl_comm_init_rank: rank `rank` of
    `world_size`, on CUDA device `device` (None: the thread's current one),
    from the `unique_id` every rank passes (broadcast_unique_id). Collective
    over the world. Pass it as Runtime's communicator with
    backend=BACKEND_NCCL. close() (or the with block's end) destroys it,
    closing first the runtimes made over it."""

    def __init__(self, world_size, rank, unique_id, device=None):
        self._comm = ctypes.c_void_p()
        self._runtimes = weakref.WeakSet()
        for name, value in (("world_size", world_size), ("rank", rank)):
            if not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if device is not None and not isinstance(device, int):
            raise TypeError(f"device must be an int or None, not {type(device).__name__}")
        uid = _checked_id(unique_id, "the unique_id argument")
        _check(lib.dmuon_nccl_comm_init_rank(ctypes.byref(self._comm), world_size, uid,
                                             len(uid), rank,
                                             _capi.UNSET if device is None else device))
        self.world_size, self.rank = world_size, rank
        self.device = _capi.UNSET if device is None else device

    @property
    def address(self):
        """The address of the ncclComm_t variable: options.communicator."""
        if not self._comm:
            raise Error(_capi.ERROR_INVALID_STATE, "the NCCL communicator is closed")
        return ctypes.addressof(self._comm)

    def _add_runtime(self, runtime):
        self._runtimes.add(runtime)

    def close(self):
        """ncclCommDestroy, after closing every runtime made over it."""
        for rt in list(self._runtimes):
            rt.close()
        if self._comm:
            _check(lib.dmuon_nccl_comm_destroy(ctypes.byref(self._comm)))

    def __del__(self):
        try:
            self.close()
        except Error:
            pass  # nothing to report to at collection time

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def communicator(rank, world_size, *, mpi=None, store=None, device=None, key=DEFAULT_KEY):
    """broadcast_unique_id over `mpi` or `store`, then NcclCommunicator on
    every rank: the host's world NCCL communicator in one call."""
    uid = broadcast_unique_id(rank, mpi=mpi, store=store, key=key)
    return NcclCommunicator(world_size, rank, uid, device)
