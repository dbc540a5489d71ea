"""The device layer: where the model's params live picks the runtime's
backend, its communicator and the kind of views the bridge re-points params
at. Everything else of dmuon.torch (hooks, groups, Z2/Z3 moves,
accumulation, schedules, clipping, state dicts) is the same on both.

- CpuDevice: CPU tensors, the MPI backend, views of host memory. Over an
  mpi4py launch the runtime takes its communicator; under torchrun at world
  size 1 the runtime runs on this process alone (dmuon.SINGLE_PROCESS: no
  mpi4py, the runtime initializes MPI itself). torchrun with more ranks has
  no MPI communicator to give the runtime: refused, saying to use mpirun or
  CUDA tensors.
- CudaDevice: CUDA tensors on one device per rank, the NCCL backend. The
  world ncclComm_t is made through dmuon.nccl (rank 0's unique id over the
  torch store or the MPI communicator), the runtime runs on the host's
  current stream of that device (torch.cuda.current_stream), so its work is
  ordered after the forward/backward kernels that stream already holds, and
  views are CUDA tensors over the runtime's device buffers (kind="cuda",
  dmuon/_cuda_view.py). Written against the documented APIs; it has not run
  on a GPU yet (docs/gpu.md).

Nothing here touches torch.cuda unless the params are CUDA tensors.
"""

import itertools

import torch

from .. import _capi
from .._runtime import SINGLE_PROCESS, Runtime
from ._launch import LaunchError, check_one_rank_per_device


def model_device(model):
    """The one device every param of `model` is on (CPU for a model without
    params); params on two devices are refused naming one of each."""
    first = None
    for name, t in model.named_parameters():
        if first is None:
            first = (name, t.device)
        elif t.device != first[1]:
            raise ValueError(f"param '{first[0]}' is on {first[1]} but '{name}' is on {t.device}: "
                             "dmuon.torch trains a model whose params are all on one device "
                             "(model.to(device) before wrap())")
    return first[1] if first else torch.device("cpu")


def device_layer(model):
    """CpuDevice or CudaDevice for where `model`'s params are."""
    device = model_device(model)
    if device.type == "cpu":
        return CpuDevice()
    if device.type == "cuda":
        return CudaDevice(device.index if device.index is not None else
                          torch.cuda.current_device())
    raise ValueError(f"the model's params are on {device}: dmuon.torch trains CPU tensors (the "
                     "MPI backend) or CUDA tensors (the NCCL backend)")


class CpuDevice:
    """CPU tensors: the MPI backend, host views."""
    type = "cpu"
    index = None
    view_kind = "torch"  # Runtime.param_view's kind
    torch_device = torch.device("cpu")

    def check_launch(self, group):
        """Refuses a launch whose ranks the MPI backend cannot reach; every
        rank sees the same group, so every rank raises."""
        if group.kind == "torch" and group.world_size > 1:
            raise LaunchError(f"dmuon.torch.wrap: CPU tensors on {group.world_size} torchrun ranks: "
                              "the runtime's MPI backend needs MPI ranks, which torchrun does not "
                              f"start; launch with mpirun -n {group.world_size} (mpi4py), or "
                              "put the model on the GPUs (model.cuda() on each rank's "
                              "LOCAL_RANK device) for torchrun")

    def runtime(self, plan, group, **options):
        """The runtime over `group` (check_launch passed)."""
        communicator = group.communicator if group.kind == "mpi" else SINGLE_PROCESS  # world 1
        return Runtime(plan, communicator, **options)

    def close(self):
        pass


_nccl_keys = itertools.count()  # one store key per communicator made in this process


class CudaDevice:
    """CUDA tensors on device `index`: the NCCL backend, CUDA views, the
    host's current stream."""
    type = "cuda"
    view_kind = "cuda"

    def __init__(self, index):
        self.index = index
        self.torch_device = torch.device("cuda", index)
        self.communicator = None

    def check_launch(self, group):
        """Collective: two ranks on one device would deadlock NCCL; every
        rank learns it from the gathered (host, device) list."""
        check_one_rank_per_device(group, self.index)

    def runtime(self, plan, group, **options):
        """The runtime over a new NCCL communicator (check_launch passed)."""
        from .. import nccl  # the NCCL plugin is loaded only for CUDA models
        key = f"{nccl.DEFAULT_KEY}/wrap-{next(_nccl_keys)}"
        if group.kind == "mpi":
            self.communicator = nccl.communicator(group.rank, group.world_size,
                                                  mpi=group.communicator, device=self.index)
        elif group.store is not None:
            self.communicator = nccl.communicator(group.rank, group.world_size, store=group.store,
                                                  device=self.index, key=key)
        else:
            raise LaunchError("dmuon.torch.wrap: this torch.distributed has no default store to "
                              "send the NCCL unique id over; launch with torchrun (env://)")
        stream = torch.cuda.current_stream(self.torch_device).cuda_stream
        try:
            return Runtime(plan, self.communicator, backend=_capi.BACKEND_NCCL, stream=stream,
                           device=self.index, **options)
        except Exception:
            self.close()
            raise

    def close(self):
        """Destroys the NCCL communicator (after the runtimes made over it)."""
        if self.communicator is not None:
            self.communicator.close()
            self.communicator = None
