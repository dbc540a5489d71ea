// The tiny residual MLP of TinyModel.h on a CUDA GPU: the same params (names,
// shapes, initial values), the same math, its GEMMs as fp32 cuBLAS SGEMMs
// (pedantic math: no TF32) and small CUDA kernels for RMSNorm, SiLU, the bias
// and residual adds, the MSE loss and their backward passes.
//
// It reads params from and accumulates gradients into the DEVICE pointers a
// ParamAccess hands out (with libdmuon's NCCL backend, tiny::RuntimeAccess
// serves the runtime's device views and gradient buffers), and calls the
// access's layer hooks around each layer as tiny::Model does. Everything is
// enqueued on one stream (the stream given to the runtime as its compute
// stream): a layer's kernels are enqueued between its hooks, and the runtime
// orders its own work against that stream. Only the loss read-back at the end
// of forwardBackward() / loss() synchronizes the stream.
//
// CUDA, cuBLAS and kernel-launch failures throw std::runtime_error with the
// error's name and message.
#ifndef DMUON_HOSTS_TINY_CUDAMODEL_H
#define DMUON_HOSTS_TINY_CUDAMODEL_H

#include "TinyModel.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace tiny {

class CudaModel {
public:
  // Allocates the activations for `batch` rows on the current device and a
  // cuBLAS handle bound to `stream`.
  CudaModel(const Config &cfg, int64_t batch, cudaStream_t stream);
  ~CudaModel();
  CudaModel(const CudaModel &) = delete;
  CudaModel &operator=(const CudaModel &) = delete;

  // As tiny::Model::forwardBackward, with x (batch x I) and t (batch x O) in
  // device memory: returns the mean loss over the batch and accumulates the
  // gradient of that mean into access.grad(...) (device pointers).
  float forwardBackward(ParamAccess &access, const float *x, const float *t);

  // Forward only (loss of a batch).
  float loss(ParamAccess &access, const float *x, const float *t);

  const Config &config() const;
  int64_t batch() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace tiny

#endif
