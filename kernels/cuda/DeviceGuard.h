// Makes a CUDA device current for a scope and restores the thread's previous
// device: the CUDA kernels and the runtime's CUDA device and NCCL backend all
// enter through it, so a call never runs on (or leaves the host thread on)
// the wrong GPU. Host C++ only.
#ifndef DMUON_KERNELS_CUDA_DEVICEGUARD_H
#define DMUON_KERNELS_CUDA_DEVICEGUARD_H

#include <cuda_runtime.h>

namespace dmuon::cuda {

class DeviceGuard {
public:
  explicit DeviceGuard(int device) : device_(device) {
    error_ = cudaGetDevice(&previous_);
    if (error_ == cudaSuccess && previous_ != device_)
      error_ = cudaSetDevice(device_);
  }
  ~DeviceGuard() {
    if (error_ == cudaSuccess && previous_ != device_)
      cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;

  int device() const { return device_; }
  // cudaSuccess unless getting or setting the device failed.
  cudaError_t error() const { return error_; }

private:
  int device_;
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

} // namespace dmuon::cuda

#endif
