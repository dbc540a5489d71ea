#include "devices/cuda/CudaDevice.h"

#include "devices/cuda/CudaDeviceGuard.h"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/CudaLinearAlgebra.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

namespace dmuon::rt {

namespace {

Status cudaCheck(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return Status::ok();
  if (e == cudaErrorMemoryAllocation)
    return {DMUON_ERROR_OUT_OF_MEMORY, std::string(what) + ": " + cudaGetErrorString(e)};
  return backendError(std::string(what) + " failed: " + cudaGetErrorString(e));
}

Status kernelCheck(const cuda::Result &r) {
  return r.ok() ? Status::ok() : backendError(r.message);
}

// Every call runs on the runtime's device and hands the host thread back on
// its own (CudaDeviceGuard.h).
class CudaDevice final : public Device {
public:
  CudaDevice(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaDevice() override {
    CudaDeviceGuard guard(device_);
    if (!guard.status())
      return;
    cudaStreamSynchronize(stream_);
    cuda::destroyContext(ctx_);
    // Outstanding allocations (none after the executor's arrays are gone)
    // would keep the pool alive until they are freed.
    if (pool_)
      cudaMemPoolDestroy(pool_);
    cudaGetLastError();
  }

  Status init() {
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    // A pool of the runtime's own. The device's default pool releases its
    // free memory to the OS at every synchronization (release threshold 0),
    // so each step would map its buffers again; the host's default pool is
    // the host's to configure, so it is left alone.
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_;
    DMUON_RETURN_IF_ERROR(cudaCheck(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate"));
    uint64_t keepAll = std::numeric_limits<uint64_t>::max();
    DMUON_RETURN_IF_ERROR(
        cudaCheck(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keepAll),
                  "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)"));
    return kernelCheck(cuda::createContext(device_, stream_, &ctx_));
  }

  Status allocate(size_t bytes, void **out) override {
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    if (bytes == 0)
      bytes = 256;
    const cudaError_t e = cudaMallocFromPoolAsync(out, bytes, pool_, stream_);
    if (e != cudaSuccess) {
      // Out of memory stays the "last error" otherwise, and the next kernel
      // launch check would report it as a launch failure.
      cudaGetLastError();
      *out = nullptr;
      return cudaCheck(e,
                       ("cudaMallocFromPoolAsync of " + std::to_string(bytes) + " bytes").c_str());
    }
    return cudaCheck(cudaMemsetAsync(*out, 0, bytes, stream_), "cudaMemsetAsync");
  }
  void release(void *p) override {
    CudaDeviceGuard guard(device_);
    if (guard.status())
      cudaFreeAsync(p, stream_);
  }
  Status upload(void *dst, const void *src, size_t bytes) override {
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    DMUON_RETURN_IF_ERROR(cudaCheck(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync"));
    return synchronize(); // the host may reuse its buffer as soon as we return
  }
  Status download(void *dst, const void *src, size_t bytes) override {
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    DMUON_RETURN_IF_ERROR(cudaCheck(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync"));
    return synchronize();
  }
  Status copy(void *dst, const void *src, size_t bytes) override {
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    return cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
                     "cudaMemcpyAsync");
  }
  Status zero(void *dst, size_t bytes) override {
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    return cudaCheck(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync");
  }
  Status copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch, size_t width,
                size_t height) override {
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    return cudaCheck(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, height,
                                       cudaMemcpyDeviceToDevice, stream_),
                     "cudaMemcpy2DAsync");
  }
  Status synchronize() override {
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    return cudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  // The kernels select the context's device themselves (CudaKernels.h).
  Status packCast(void *dst, PackedType type, const float *src, int64_t n) override {
    return kernelCheck(cuda::packCast(ctx_, dst, type, src, n));
  }
  Status scaleCopy(float *dst, const float *src, float scale, int64_t n) override {
    return kernelCheck(cuda::scaleCopy(ctx_, dst, src, scale, n));
  }
  Status scaleAdd(float *dst, const float *src, float scale, int64_t n) override {
    return kernelCheck(cuda::scaleAdd(ctx_, dst, src, scale, n));
  }
  Status addSumOfSquares(const float *x, int64_t n, double *acc) override {
    return kernelCheck(cuda::addSumOfSquares(ctx_, x, n, acc));
  }
  Status muonStep(float *param, float *momentum, const float *grad, int64_t batch, int64_t rows,
                  int64_t cols, const MuonHyper &h) override {
    return kernelCheck(cuda::muonStep(ctx_, param, momentum, grad, batch, rows, cols, h));
  }
  Status muonMomentum(float *momentum, const float *grad, float *u, int64_t n,
                      const MuonHyper &h) override {
    return kernelCheck(cuda::muonMomentum(ctx_, momentum, grad, u, n, h));
  }
  Status newtonSchulz(float *x, int64_t batch, int64_t rows, int64_t cols,
                      const MuonHyper &h) override {
    return kernelCheck(
        cuda::newtonSchulz(ctx_, x, x, batch, rows, cols, h.nsSteps, h.coefficients, h.nsForm));
  }
  Status muonApply(float *param, const float *ortho, int64_t n, int64_t rows, int64_t cols,
                   const MuonHyper &h) override {
    return kernelCheck(cuda::muonApply(ctx_, param, ortho, n, rows, cols, h));
  }
  Status normuonNormalize(float *ortho, float *secondMoment, int64_t batch, int64_t rows,
                          int64_t cols, float beta2) override {
    return kernelCheck(cuda::normuonNormalize(ctx_, ortho, secondMoment, batch, rows, cols, beta2));
  }
  Status reserve(const std::vector<MatrixShape> &shapes) override {
    return kernelCheck(cuda::reserveWorkspace(ctx_, shapes.data(), shapes.size()));
  }
  Status adamwStep(float *param, float *m, float *v, const float *grad, int64_t n, int64_t step,
                   const AdamWHyper &h) override {
    return kernelCheck(cuda::adamwStep(ctx_, param, m, v, grad, n, step, h));
  }

  // SOAP and Shampoo (kernels/cuda/CudaLinearAlgebra.h).
  bool hasPreconditionerKernels() const override { return true; }
  Status reservePreconditioner(int64_t maxSide) override {
    return kernelCheck(cuda::reserveLinearAlgebra(ctx_, maxSide));
  }
  Status gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, const float *b, float beta, float *c) override {
    return kernelCheck(cuda::gemm(ctx_, transA, transB, m, n, k, alpha, a, b, beta, c));
  }
  Status symmetricEigen(float *a, float *values, int64_t n) override {
    return kernelCheck(cuda::symmetricEigen(ctx_, a, values, n));
  }
  Status orthonormalize(float *a, int64_t n) override {
    return kernelCheck(cuda::orthonormalize(ctx_, a, n));
  }
  Status adamDirection(float *out, const float *m, float *v, const float *g, int64_t n, float beta2,
                       float eps, float vScale) override {
    return kernelCheck(cuda::adamDirection(ctx_, out, m, v, g, n, beta2, eps, vScale));
  }
  Status decayAdd(float *dst, const float *src, float keep, float take, int64_t n) override {
    return kernelCheck(cuda::decayAdd(ctx_, dst, src, keep, take, n));
  }
  Status clampMagnitude(float *x, int64_t n, float bound) override {
    return kernelCheck(cuda::clampMagnitude(ctx_, x, n, bound));
  }
  Status permute(float *x, int64_t rows, int64_t cols, const int64_t *order, bool columns,
                 float *scratch) override {
    return kernelCheck(cuda::permute(ctx_, x, rows, cols, order, columns, scratch));
  }
  Status scaleColumns(float *x, int64_t rows, int64_t cols, const float *scales) override {
    return kernelCheck(cuda::scaleColumns(ctx_, x, rows, cols, scales));
  }

private:
  int device_;
  cudaStream_t stream_;
  cudaMemPool_t pool_ = nullptr;
  cuda::Context *ctx_ = nullptr; // cuBLAS handle and NS workspaces, once per runtime
};

} // namespace

Status createCudaDevice(int device, void *stream, std::unique_ptr<Device> &out) {
  if (!stream)
    return invalidArgument("options.stream is null; pass the host's compute cudaStream_t");
  auto dev = std::make_unique<CudaDevice>(device, static_cast<cudaStream_t>(stream));
  DMUON_RETURN_IF_ERROR(dev->init());
  out = std::move(dev);
  return Status::ok();
}

} // namespace dmuon::rt
