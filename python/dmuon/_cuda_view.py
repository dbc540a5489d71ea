"""Zero-copy CUDA tensors over the NCCL backend's device buffers.

The NCCL backend's param_view / grad_view are device pointers. torch wraps
device memory it did not allocate through the CUDA Array Interface
(numba's __cuda_array_interface__, version 2): torch.as_tensor(obj,
device=...) makes a tensor over the pointer, without a copy, and holds `obj`
until the tensor's storage dies; `obj` holds the view keeper, so the runtime
outlives every tensor over its memory (as the host views' buffer does).

Imported only for kind="cuda", so a CPU-only process never touches torch.cuda.
"""

from . import _capi

# The interface's typestr per plan dtype. It has no bfloat16: a bf16 buffer is
# read as int16 (same size) and reinterpreted with Tensor.view(torch.bfloat16).
_TYPESTRS = {_capi.DTYPE_F32: "<f4", _capi.DTYPE_F16: "<f2", _capi.DTYPE_F64: "<f8",
             _capi.DTYPE_BF16: "<i2"}


class _DeviceBuffer:
    """What torch.as_tensor reads: a C-contiguous array at `address`."""
    __slots__ = ("_interface", "keeper")

    def __init__(self, address, shape, typestr, keeper):
        self._interface = {"shape": tuple(shape), "typestr": typestr, "data": (address, False),
                           "strides": None, "version": 2}
        self.keeper = keeper

    @property
    def __cuda_array_interface__(self):
        return self._interface


def cuda_view(address, shape, dtype, device, keeper):
    """A CUDA tensor of `shape` and the plan's `dtype` over device memory at
    `address` on CUDA device `device` (-1: the pointer's own), zero-copy."""
    import torch
    from ._runtime import _torch_dtype
    where = torch.device("cuda", device) if device is not None and device >= 0 else "cuda"
    numel = 1
    for n in shape:
        numel *= n
    if numel == 0 or not address:
        return torch.empty(shape, dtype=_torch_dtype(dtype), device=where)
    buffer = _DeviceBuffer(address, shape, _TYPESTRS[dtype], keeper)
    tensor = torch.as_tensor(buffer, device=where)
    if dtype == _capi.DTYPE_BF16:
        tensor = tensor.view(torch.bfloat16)
    return tensor
