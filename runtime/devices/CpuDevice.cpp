#include "devices/CpuDevice.h"

#include "core/Precision.h"
#include "kernels/cpu/LinearAlgebra.h"
#include "kernels/cpu/MuonKernels.h"

#include <cstring>
#include <new>

namespace dmuon::rt {

namespace {

constexpr size_t kAlignment = 256;

class CpuDevice final : public Device {
public:
  Status allocate(size_t bytes, void **out) override {
    if (bytes == 0)
      bytes = kAlignment; // a live array always has storage
    void *p = ::operator new(bytes, std::align_val_t(kAlignment), std::nothrow);
    if (!p)
      return {DMUON_ERROR_OUT_OF_MEMORY,
              "cannot allocate " + std::to_string(bytes) + " bytes of host memory"};
    std::memset(p, 0, bytes);
    *out = p;
    return Status::ok();
  }
  void release(void *p) override { ::operator delete(p, std::align_val_t(kAlignment)); }
  Status upload(void *dst, const void *src, size_t bytes) override { return copy(dst, src, bytes); }
  Status download(void *dst, const void *src, size_t bytes) override {
    return copy(dst, src, bytes);
  }
  Status copy(void *dst, const void *src, size_t bytes) override {
    if (bytes)
      std::memmove(dst, src, bytes);
    return Status::ok();
  }
  Status zero(void *dst, size_t bytes) override {
    std::memset(dst, 0, bytes);
    return Status::ok();
  }

  Status packCast(void *dst, PackedType type, const float *src, int64_t n) override {
    if (type == PackedType::BF16) {
      auto *h = static_cast<uint16_t *>(dst);
      for (int64_t k = 0; k < n; ++k)
        h[k] = floatToBf16(src[k]);
      return Status::ok();
    }
    return copy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
  Status scaleCopy(float *dst, const float *src, float scale, int64_t n) override {
    for (int64_t k = 0; k < n; ++k)
      dst[k] = src[k] * scale;
    return Status::ok();
  }
  Status scaleAdd(float *dst, const float *src, float scale, int64_t n) override {
    for (int64_t k = 0; k < n; ++k)
      dst[k] = dst[k] + src[k] * scale;
    return Status::ok();
  }
  Status addSumOfSquares(const float *x, int64_t n, double *acc) override {
    double sum = 0.0;
    for (int64_t k = 0; k < n; ++k)
      sum += static_cast<double>(x[k]) * static_cast<double>(x[k]);
    *acc += sum;
    return Status::ok();
  }
  Status muonStep(float *param, float *momentum, const float *grad, int64_t batch, int64_t rows,
                  int64_t cols, const MuonHyper &h) override {
    kernels::muonStep(param, momentum, grad, batch, rows, cols, h, workspace_);
    return Status::ok();
  }
  Status muonMomentum(float *momentum, const float *grad, float *u, int64_t n,
                      const MuonHyper &h) override {
    kernels::muonMomentum(momentum, grad, u, n, h);
    return Status::ok();
  }
  Status newtonSchulz(float *x, int64_t batch, int64_t rows, int64_t cols,
                      const MuonHyper &h) override {
    // One call for the whole batch: it spreads the matrices over the cores
    // (kernels::newtonSchulzBatched) instead of running each in turn.
    kernels::newtonSchulzBatched(x, x, batch, rows, cols, h.nsSteps, h.coefficients, workspace_,
                                 h.nsForm);
    return Status::ok();
  }
  Status muonApply(float *param, const float *ortho, int64_t n, int64_t rows, int64_t cols,
                   const MuonHyper &h) override {
    kernels::muonApply(param, ortho, n, rows, cols, h);
    return Status::ok();
  }
  Status normuonNormalize(float *ortho, float *secondMoment, int64_t batch, int64_t rows,
                          int64_t cols, float beta2) override {
    kernels::normuonNormalize(ortho, secondMoment, batch, rows, cols, beta2);
    return Status::ok();
  }
  Status copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch, size_t width,
                size_t height) override {
    for (size_t r = 0; r < height; ++r)
      std::memcpy(static_cast<uint8_t *>(dst) + r * dstPitch,
                  static_cast<const uint8_t *>(src) + r * srcPitch, width);
    return Status::ok();
  }
  Status adamwStep(float *param, float *m, float *v, const float *grad, int64_t n, int64_t step,
                   const AdamWHyper &h) override {
    kernels::adamwStep(param, m, v, grad, n, step, h);
    return Status::ok();
  }
  bool hasPreconditionerKernels() const override { return true; }
  Status gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, const float *b, float beta, float *c) override {
    kernels::gemm(transA, transB, m, n, k, alpha, a, b, beta, c);
    return Status::ok();
  }
  Status symmetricEigen(float *a, float *values, int64_t n) override {
    return lapackStatus(kernels::symmetricEigen(a, values, n, linalg_));
  }
  Status orthonormalize(float *a, int64_t n) override {
    return lapackStatus(kernels::orthonormalize(a, n, linalg_));
  }
  Status adamDirection(float *out, const float *m, float *v, const float *g, int64_t n, float beta2,
                       float eps, float vScale) override {
    kernels::adamDirection(out, m, v, g, n, beta2, eps, vScale);
    return Status::ok();
  }
  Status decayAdd(float *dst, const float *src, float keep, float take, int64_t n) override {
    kernels::decayAdd(dst, src, keep, take, n);
    return Status::ok();
  }
  Status clampMagnitude(float *x, int64_t n, float bound) override {
    kernels::clampMagnitude(x, n, bound);
    return Status::ok();
  }
  Status permute(float *x, int64_t rows, int64_t cols, const int64_t *order, bool columns,
                 float *scratch) override {
    kernels::permute(x, rows, cols, order, columns, scratch);
    return Status::ok();
  }
  Status scaleColumns(float *x, int64_t rows, int64_t cols, const float *scales) override {
    kernels::scaleColumns(x, rows, cols, scales);
    return Status::ok();
  }
  Status synchronize() override { return Status::ok(); }

private:
  static Status lapackStatus(const std::string &error) {
    return error.empty() ? Status::ok() : Status(DMUON_ERROR_BACKEND, error);
  }
  kernels::NsWorkspace workspace_; // grown once, reused every step
  kernels::LinalgWorkspace linalg_;
};

} // namespace

std::unique_ptr<Device> createCpuDevice() { return std::make_unique<CpuDevice>(); }

} // namespace dmuon::rt
