// GPU memory (stream-ordered allocations on the host's compute stream) and
// the CUDA kernels of kernels/cuda: the device of the NCCL backend.
#ifndef DMUON_RUNTIME_DEVICES_CUDA_CUDADEVICE_H
#define DMUON_RUNTIME_DEVICES_CUDA_CUDADEVICE_H

#include "core/Device.h"

#include <memory>

namespace dmuon::rt {

Status createCudaDevice(int device, void *stream, std::unique_ptr<Device> &out);

} // namespace dmuon::rt

#endif
