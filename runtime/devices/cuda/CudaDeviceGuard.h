// Makes the runtime's device current for the duration of a call and restores
// the host thread's device afterwards: the host may drive several GPUs from
// one thread, and a runtime call must neither run on the host's current
// device nor leave the thread on the runtime's.
#ifndef DMUON_RUNTIME_DEVICES_CUDA_CUDADEVICEGUARD_H
#define DMUON_RUNTIME_DEVICES_CUDA_CUDADEVICEGUARD_H

#include "base/Status.h"
#include "kernels/cuda/DeviceGuard.h"

#include <cuda_runtime.h>

#include <string>

namespace dmuon::rt {

class CudaDeviceGuard : public cuda::DeviceGuard {
public:
  using cuda::DeviceGuard::DeviceGuard;
  Status status() const {
    if (error() == cudaSuccess)
      return Status::ok();
    return backendError("selecting CUDA device " + std::to_string(device()) +
                        " failed: " + cudaGetErrorString(error()));
  }
};

// Opens a CudaDeviceGuard named `guard` and returns its failure, if any.
#define DMUON_CUDA_DEVICE_SCOPE(guard, device)                                                     \
  ::dmuon::rt::CudaDeviceGuard guard(device);                                                      \
  DMUON_RETURN_IF_ERROR(guard.status())

} // namespace dmuon::rt

#endif
