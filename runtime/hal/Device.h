// Memory and math of one rank's optimizer work, on the host (CpuDevice) or a
// GPU (CudaDevice). Like Backend, the executor calls only this interface.
// Device operations are ordered among themselves (a CUDA device runs them on
// the host's compute stream); download() completes before it returns.
#ifndef DMUON_RUNTIME_HAL_DEVICE_H
#define DMUON_RUNTIME_HAL_DEVICE_H

#include "base/Status.h"
#include "kernels/cpu/MuonKernels.h"

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace dmuon::rt {

// The kernels' own types (kernels/Hyper.h), shared by every device.
using kernels::AdamWHyper;
using kernels::MatrixShape;
using kernels::MuonHyper;
using kernels::PackedType;

class Device {
public:
  virtual ~Device() = default;

  // Zero-filled memory of `bytes` (at least 256-byte aligned).
  virtual Status allocate(size_t bytes, void **out) = 0;
  virtual void release(void *p) = 0;
  virtual Status upload(void *dst, const void *hostSrc, size_t bytes) = 0;
  virtual Status download(void *hostDst, const void *src, size_t bytes) = 0;
  virtual Status copy(void *dst, const void *src, size_t bytes) = 0;
  virtual Status zero(void *dst, size_t bytes) = 0;

  virtual Status packCast(void *dst, PackedType type, const float *src, int64_t n) = 0;
  virtual Status scaleCopy(float *dst, const float *src, float scale, int64_t n) = 0;
  // dst[i] = dst[i] + src[i] * scale.
  virtual Status scaleAdd(float *dst, const float *src, float scale, int64_t n) = 0;
  // acc[0] += the sum of x[i]^2 in double; `acc` is device memory. A
  // non-finite x[i] makes it non-finite.
  virtual Status addSumOfSquares(const float *x, int64_t n, double *acc) = 0;
  virtual Status muonStep(float *param, float *momentum, const float *grad, int64_t batch,
                          int64_t rows, int64_t cols, const MuonHyper &h) = 0;
  virtual Status adamwStep(float *param, float *m, float *v, const float *grad, int64_t n,
                           int64_t step, const AdamWHyper &h) = 0;

  // The pieces of muonStep for a matrix gathered over a model-parallel group
  // (muonStep == muonMomentum, newtonSchulz, muonApply).
  virtual Status muonMomentum(float *momentum, const float *grad, float *u, int64_t n,
                              const MuonHyper &h) = 0;
  virtual Status newtonSchulz(float *x, int64_t batch, int64_t rows, int64_t cols,
                              const MuonHyper &h) = 0;
  // Decay and update with the orthogonalized slice; rows x cols is the full
  // matrix, which sets the lr scale.
  virtual Status muonApply(float *param, const float *ortho, int64_t n, int64_t rows, int64_t cols,
                           const MuonHyper &h) = 0;
  // NorMuon's per-row normalization of an orthogonalized update, between
  // newtonSchulz and muonApply (kernels/cpu/MuonKernels.h).
  virtual Status normuonNormalize(float *ortho, float *secondMoment, int64_t batch, int64_t rows,
                                  int64_t cols, float beta2) = 0;
  // The linear algebra of the preconditioned rules (SOAP, Shampoo:
  // optim/Preconditioned.h), on device memory unless a pointer is said to
  // be the host's (kernels/cpu/LinearAlgebra.h has their semantics). A
  // device without them says so (hasPreconditionerKernels) and the runtime
  // refuses such plans at create.
  virtual bool hasPreconditionerKernels() const { return false; }
  // Sizes the factorizations' scratch for square matrices up to maxSide
  // once, so that no step allocates (optional: it grows on demand).
  virtual Status reservePreconditioner(int64_t /*maxSide*/) { return Status::ok(); }
  virtual Status gemm(bool /*transA*/, bool /*transB*/, int64_t /*m*/, int64_t /*n*/, int64_t /*k*/,
                      float /*alpha*/, const float * /*a*/, const float * /*b*/, float /*beta*/,
                      float * /*c*/) {
    return noPreconditionerKernels();
  }
  // `values`: device memory, descending.
  virtual Status symmetricEigen(float * /*a*/, float * /*values*/, int64_t /*n*/) {
    return noPreconditionerKernels();
  }
  virtual Status orthonormalize(float * /*a*/, int64_t /*n*/) { return noPreconditionerKernels(); }
  virtual Status adamDirection(float * /*out*/, const float * /*m*/, float * /*v*/,
                               const float * /*g*/, int64_t /*n*/, float /*beta2*/, float /*eps*/,
                               float /*vScale*/) {
    return noPreconditionerKernels();
  }
  virtual Status decayAdd(float * /*dst*/, const float * /*src*/, float /*keep*/, float /*take*/,
                          int64_t /*n*/) {
    return noPreconditionerKernels();
  }
  virtual Status clampMagnitude(float * /*x*/, int64_t /*n*/, float /*bound*/) {
    return noPreconditionerKernels();
  }
  // `order`: host memory; `scratch`: rows * cols device floats.
  virtual Status permute(float * /*x*/, int64_t /*rows*/, int64_t /*cols*/,
                         const int64_t * /*order*/, bool /*columns*/, float * /*scratch*/) {
    return noPreconditionerKernels();
  }
  // `scales`: host memory.
  virtual Status scaleColumns(float * /*x*/, int64_t /*rows*/, int64_t /*cols*/,
                              const float * /*scales*/) {
    return noPreconditionerKernels();
  }
  // `height` rows of `width` bytes between pitched buffers.
  virtual Status copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch, size_t width,
                        size_t height) = 0;
  // Sizes NS scratch once for every shape the steps will run, so that no
  // step allocates (the scratch a shape needs is not a function of its
  // element count alone).
  virtual Status reserve(const std::vector<MatrixShape> &shapes) {
    (void)shapes;
    return Status::ok();
  }
  virtual Status synchronize() = 0;

protected:
  static Status noPreconditionerKernels() {
    return unsupported(
        "this device has no SOAP/Shampoo kernels (the CPU and CUDA devices have them)");
  }
};

// Bytes of one kind of memory held now and at most (dmuon_runtime_memory).
struct MemoryAccount {
  uint64_t live = 0, peak = 0;
  void add(uint64_t bytes) {
    live += bytes;
    peak = live > peak ? live : peak;
  }
  void sub(uint64_t bytes) { live -= bytes; }
};

// Device memory owned for the lifetime of the array (RAII over Device),
// counted in an account when given one.
class DeviceArray {
public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;
  DeviceArray(DeviceArray &&o) noexcept { *this = std::move(o); }
  DeviceArray &operator=(DeviceArray &&o) noexcept {
    std::swap(dev_, o.dev_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(account_, o.account_);
    return *this;
  }
  ~DeviceArray() { release(); }

  Status allocate(Device &dev, size_t bytes, MemoryAccount *account = nullptr) {
    release();
    void *p = nullptr;
    DMUON_RETURN_IF_ERROR(dev.allocate(bytes, &p));
    dev_ = &dev;
    ptr_ = p;
    bytes_ = bytes;
    account_ = account;
    if (account_)
      account_->add(bytes);
    return Status::ok();
  }
  void release() {
    if (ptr_) {
      dev_->release(ptr_);
      if (account_)
        account_->sub(bytes_);
    }
    ptr_ = nullptr;
    bytes_ = 0;
    account_ = nullptr;
  }
  bool live() const { return ptr_ != nullptr; }
  uint8_t *bytes() const { return static_cast<uint8_t *>(ptr_); }
  float *floats() const { return static_cast<float *>(ptr_); }
  size_t size() const { return bytes_; }

private:
  Device *dev_ = nullptr;
  void *ptr_ = nullptr;
  size_t bytes_ = 0;
  MemoryAccount *account_ = nullptr;
};

} // namespace dmuon::rt

#endif
