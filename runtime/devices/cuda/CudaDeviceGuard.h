// Makes the runtime's device current for the duration of a call and restores
// the host thread's device afterwards: the host may drive several GPUs from
// one thread, and a runtime call must neither run on the host's current
// device nor leave the thread on the runtime's.
#ifndef DMUON_RUNTIME_DEVICES_CUDA_CUDADEVICEGUARD_H
#define DMUON_RUNTIME_DEVICES_CUDA_CUDADEVICEGUARD_H

#include "core/Status.h"

#include <cuda_runtime.h>

#include <string>

namespace dmuon::rt {

class CudaDeviceGuard {
public:
  explicit CudaDeviceGuard(int device) : device_(device) {
    error_ = cudaGetDevice(&previous_);
    if (error_ == cudaSuccess && previous_ != device_)
      error_ = cudaSetDevice(device_);
  }
  ~CudaDeviceGuard() {
    if (error_ == cudaSuccess && previous_ != device_)
      cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard &) = delete;
  CudaDeviceGuard &operator=(const CudaDeviceGuard &) = delete;

  Status status() const {
    if (error_ == cudaSuccess)
      return Status::ok();
    return backendError("selecting CUDA device " + std::to_string(device_) +
                        " failed: " + cudaGetErrorString(error_));
  }

private:
  int device_;
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

// Opens a CudaDeviceGuard named `guard` and returns its failure, if any.
#define DMUON_CUDA_DEVICE_SCOPE(guard, device)                                                     \
  ::dmuon::rt::CudaDeviceGuard guard(device);                                                      \
  DMUON_RETURN_IF_ERROR(guard.status())

} // namespace dmuon::rt

#endif
