"""The process group wrap() runs over: how the ranks found each other.

dmuon.torch needs a few things of its launch besides the runtime's own
communicator: rank 0 compiles the plan and every rank hears whether it
worked, state_dict() gathers the checkpoint's files, and the NCCL unique id
travels from rank 0 to the others. Two launches provide them:

- MpiGroup: an mpi4py communicator (mpirun / srun; as before), which is
  also the MPI backend's communicator;
- TorchGroup: torch.distributed's initialized default group (torchrun,
  env:// with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), through its
  object collectives and its store. No mpi4py is imported on this path;
- SingleProcess: a process started on its own (python3 train.py), which
  trains alone, as torch.optim would: world size 1, an in-process store.

launch_group() picks one (docs/python.md, "On GPUs"); a half-made launch
(torchrun's variables without a process group) is an error saying how to
launch, never a hang.
"""

import itertools
import os
import socket
import sys

# Environment variables an MPI launcher sets in every rank (Open MPI, PMIx,
# MPICH/Hydra and Intel MPI, MVAPICH).
_MPI_LAUNCH_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                         "MV2_COMM_WORLD_SIZE")
# What torchrun (torch.distributed.run) sets in every rank.
_TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

HOW_TO_LAUNCH = ("launch with torchrun (torchrun --nproc_per_node=N train.py, and call "
                 "torch.distributed.init_process_group() before wrap()) or with mpirun "
                 "(mpirun -n N python3 train.py, mpi4py installed), or pass "
                 "communicator=<an mpi4py communicator>")


class LaunchError(RuntimeError):
    """A launch dmuon.torch cannot run on (no process group, a world size
    other than the plan's, two ranks on one device): raised on every rank."""


class MpiGroup:
    """An mpi4py communicator."""
    kind = "mpi"

    def __init__(self, communicator):
        from mpi4py import MPI
        if not isinstance(communicator, MPI.Comm):
            raise TypeError(f"communicator= must be an mpi4py communicator (MPI.Comm), not "
                            f"{type(communicator).__name__}")
        self.communicator = communicator
        self.rank, self.world_size = communicator.Get_rank(), communicator.Get_size()
        self.store = None

    def broadcast_object(self, obj, root=0):
        return self.communicator.bcast(obj, root=root)

    def all_gather_object(self, obj):
        return self.communicator.allgather(obj)


class TorchGroup:
    """torch.distributed's default group (initialized by the host, e.g. under
    torchrun). Its object collectives run on the group's backend: gloo on the
    CPU; NCCL stages the objects on a CUDA device, the model's
    (`cuda_device`, set by wrap) rather than whatever device is current."""
    kind = "torch"

    def __init__(self):
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise LaunchError("torch.distributed has no initialized default group: call "
                              "torch.distributed.init_process_group() before wrap()")
        self._dist = dist
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.store = _default_store(dist)
        self.cuda_device = None

    def _on_device(self):
        import contextlib
        if self.cuda_device is None:
            return contextlib.nullcontext()
        import torch
        return torch.cuda.device(self.cuda_device)

    def broadcast_object(self, obj, root=0):
        box = [obj if self.rank == root else None]
        with self._on_device():
            self._dist.broadcast_object_list(box, src=root)
        return box[0]

    def all_gather_object(self, obj):
        out = [None] * self.world_size
        with self._on_device():
            self._dist.all_gather_object(out, obj)
        return out


class SingleProcess:
    """A process launched on its own: rank 0 of 1. The runtime runs on this
    process alone (dmuon.SINGLE_PROCESS on the CPU; a one-rank NCCL
    communicator whose unique id goes through an in-process store)."""
    kind = "single"
    rank, world_size = 0, 1

    def __init__(self):
        import torch.distributed as dist
        self.store = dist.HashStore() if dist.is_available() else None

    def broadcast_object(self, obj, root=0):
        return obj

    def all_gather_object(self, obj):
        return [obj]


_store_exchanges = itertools.count()  # one key prefix per exchange made in this process


def store_all_gather(store, rank, world_size, text):
    """Every rank's `text` over a torch.distributed store (each rank sets its
    key, then waits for the others' within the store's timeout): a gather that
    needs no backend collective, so it works where the group's NCCL would not
    (two ranks on one device)."""
    prefix = f"dmuon/exchange-{next(_store_exchanges)}"
    store.set(f"{prefix}/{rank}", text.encode())
    return [store.get(f"{prefix}/{r}").decode() for r in range(world_size)]


def _default_store(dist):
    """The default group's store (what env:// made), or None where this torch
    does not expose it."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError):
        return None


def _torch_group_initialized():
    if "torch.distributed" not in sys.modules:
        return False
    import torch.distributed as dist
    return dist.is_available() and dist.is_initialized()


def _mpi_launched(environ):
    """An MPI launcher started this process, or the host initialized MPI
    itself (it imported mpi4py, which initializes MPI at import)."""
    if any(v in environ for v in _MPI_LAUNCH_VARIABLES):
        return True
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()


def as_group(communicator):
    """None, a group of this module as it is, or an mpi4py communicator as an
    MpiGroup: what functions taking `communicator=` accept."""
    if communicator is None or isinstance(communicator, (MpiGroup, TorchGroup, SingleProcess)):
        return communicator
    return MpiGroup(communicator)


def launch_group(communicator=None, environ=None):
    """The group wrap() runs over: communicator= (an mpi4py communicator, or
    a group of this module) if given; else torch.distributed's initialized
    default group; else MPI.COMM_WORLD where mpirun launched the process (or
    mpi4py is already initialized); else, with none of torchrun's variables
    set, this process alone (SingleProcess); else a LaunchError saying how
    to launch."""
    environ = os.environ if environ is None else environ
    if communicator is not None:
        return as_group(communicator)
    if _torch_group_initialized():
        return TorchGroup()
    if _mpi_launched(environ):
        from mpi4py import MPI
        return MpiGroup(MPI.COMM_WORLD)
    torchrun = [v for v in _TORCHRUN_VARIABLES if v in environ]
    if "RANK" in environ and "WORLD_SIZE" in environ:
        raise LaunchError(f"dmuon.torch.wrap: this process was launched by torchrun "
                          f"(WORLD_SIZE={environ['WORLD_SIZE']}, RANK={environ['RANK']}) but "
                          "torch.distributed has no initialized default group: call "
                          "torch.distributed.init_process_group() (\"gloo\" for CPU tensors, "
                          "\"nccl\" for CUDA ones) before wrap()")
    if not torchrun:
        return SingleProcess()
    raise LaunchError(f"dmuon.torch.wrap: no process group and no MPI launch (only "
                      f"{', '.join(torchrun)} of torchrun's variables is set): " + HOW_TO_LAUNCH)


def check_world_size(plan_world_size, group, what="the plan"):
    """The plan (or mesh) must span exactly the launch's ranks: a mismatch
    would leave collectives waiting for ranks that do not exist."""
    if plan_world_size != group.world_size:
        raise LaunchError(f"dmuon.torch.wrap: {what} is for {plan_world_size} rank(s) but the "
                          f"launch ({group.kind}) has {group.world_size}: launch "
                          f"{plan_world_size} processes, or give mesh= / plan= for "
                          f"{group.world_size}")


def device_identity(device_index):
    """What two ranks sharing one CUDA device would both report."""
    return (socket.gethostname(), device_index)


def shared_devices(identities):
    """The ranks that share a (host, device) with another rank, as
    {(host, device): [ranks]}; identities[r] is rank r's
    device_identity(). A CPU rank (device None) shares nothing."""
    by_device = {}
    for rank, (host, device) in enumerate(identities):
        if device is not None:
            by_device.setdefault((host, device), []).append(rank)
    return {key: ranks for key, ranks in by_device.items() if len(ranks) > 1}


def check_one_rank_per_device(group, device_index):
    """Collective: every rank learns if two ranks drive one CUDA device (a
    torchrun without torch.cuda.set_device(LOCAL_RANK), say), which NCCL
    would hang or fail on later."""
    mine = device_identity(device_index)
    if group.store is not None:
        texts = store_all_gather(group.store, group.rank, group.world_size,
                                 f"{mine[0]}\n{'' if mine[1] is None else mine[1]}")
        identities = [(host, int(device) if device else None)
                      for host, _, device in (t.rpartition("\n") for t in texts)]
    else:
        identities = group.all_gather_object(mine)
    shared = shared_devices(identities)
    if shared:
        (host, device), ranks = sorted(shared.items())[0]
        raise LaunchError(f"dmuon.torch.wrap: ranks {ranks} all have their params on cuda:{device} "
                          f"of host {host!r}: give each rank its own GPU (under torchrun: "
                          "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before moving "
                          "the model with model.cuda())")
