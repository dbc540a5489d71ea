// GPU memory (stream-ordered allocations on the host's compute stream) and
// the CUDA kernels of kernels/cuda: the device of the NCCL backend.
#ifndef DMUON_RUNTIME_DEVICES_CUDA_CUDADEVICE_H
#define DMUON_RUNTIME_DEVICES_CUDA_CUDADEVICE_H

#include "hal/Device.h"

#include <memory>

namespace dmuon::rt {

// `device` is the resolved device (devices/cuda/DeviceChoice.h), `stream` the
// host's compute cudaStream_t on it.
Status createCudaDevice(int device, void *stream, std::unique_ptr<Device> &out);

} // namespace dmuon::rt

#endif
