// The CUDA-vs-CPU step comparison of CudaPreconditionerTest.cpp checked on
// the CPU alone, where it always runs: the CPU device against itself with
// what a correct GPU may do differently (eigenvectors of other signs, GEMM
// results off by rounding) stays within kStepTolerance, and against itself
// with a wrong kernel (a transposed Q, rows scaled for columns, Adam's
// second moment not updated) goes far beyond it.
#include "PreconditionerRun.h"
#include "devices/CpuDevice.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

namespace {

using namespace dmuon::rt;
using namespace dmuon::rt::precond_test;

// Every call goes to `base` (a CPU device: its memory is the host's, so
// the variants below may touch results directly).
class ForwardingDevice : public Device {
public:
  explicit ForwardingDevice(std::unique_ptr<Device> base) : base_(std::move(base)) {}
  Status allocate(size_t bytes, void **out) override { return base_->allocate(bytes, out); }
  void release(void *p) override { base_->release(p); }
  Status upload(void *d, const void *s, size_t b) override { return base_->upload(d, s, b); }
  Status download(void *d, const void *s, size_t b) override { return base_->download(d, s, b); }
  Status copy(void *d, const void *s, size_t b) override { return base_->copy(d, s, b); }
  Status zero(void *d, size_t b) override { return base_->zero(d, b); }
  Status packCast(void *d, PackedType t, const float *s, int64_t n) override {
    return base_->packCast(d, t, s, n);
  }
  Status scaleCopy(float *d, const float *s, float scale, int64_t n) override {
    return base_->scaleCopy(d, s, scale, n);
  }
  Status scaleAdd(float *d, const float *s, float scale, int64_t n) override {
    return base_->scaleAdd(d, s, scale, n);
  }
  Status addSumOfSquares(const float *x, int64_t n, double *acc) override {
    return base_->addSumOfSquares(x, n, acc);
  }
  Status muonStep(float *p, float *m, const float *g, int64_t b, int64_t r, int64_t c,
                  const MuonHyper &h) override {
    return base_->muonStep(p, m, g, b, r, c, h);
  }
  Status adamwStep(float *p, float *m, float *v, const float *g, int64_t n, int64_t step,
                   const AdamWHyper &h) override {
    return base_->adamwStep(p, m, v, g, n, step, h);
  }
  Status muonMomentum(float *m, const float *g, float *u, int64_t n, const MuonHyper &h) override {
    return base_->muonMomentum(m, g, u, n, h);
  }
  Status newtonSchulz(float *x, int64_t b, int64_t r, int64_t c, const MuonHyper &h) override {
    return base_->newtonSchulz(x, b, r, c, h);
  }
  Status muonApply(float *p, const float *o, int64_t n, int64_t r, int64_t c,
                   const MuonHyper &h) override {
    return base_->muonApply(p, o, n, r, c, h);
  }
  Status normuonNormalize(float *o, float *v, int64_t b, int64_t r, int64_t c,
                          float beta2) override {
    return base_->normuonNormalize(o, v, b, r, c, beta2);
  }
  bool hasPreconditionerKernels() const override { return base_->hasPreconditionerKernels(); }
  Status gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              const float *b, float beta, float *c) override {
    return base_->gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  Status symmetricEigen(float *a, float *values, int64_t n) override {
    return base_->symmetricEigen(a, values, n);
  }
  Status orthonormalize(float *a, int64_t n) override { return base_->orthonormalize(a, n); }
  Status adamDirection(float *out, const float *m, float *v, const float *g, int64_t n, float beta2,
                       float eps, float vScale) override {
    return base_->adamDirection(out, m, v, g, n, beta2, eps, vScale);
  }
  Status decayAdd(float *d, const float *s, float keep, float take, int64_t n) override {
    return base_->decayAdd(d, s, keep, take, n);
  }
  Status clampMagnitude(float *x, int64_t n, float bound) override {
    return base_->clampMagnitude(x, n, bound);
  }
  Status permute(float *x, int64_t r, int64_t c, const int64_t *order, bool columns,
                 float *scratch) override {
    return base_->permute(x, r, c, order, columns, scratch);
  }
  Status scaleColumns(float *x, int64_t r, int64_t c, const float *scales) override {
    return base_->scaleColumns(x, r, c, scales);
  }
  Status copy2D(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h) override {
    return base_->copy2D(d, dp, s, sp, w, h);
  }
  Status synchronize() override { return base_->synchronize(); }

private:
  std::unique_ptr<Device> base_;
};

// What a correct GPU may differ in: every other eigenvector negated, every
// GEMM result off by up to 16 ulps (another summation order), and the
// eigenvectors' entries (about 0.2 here) off by up to 1e-6 (another
// eigensolver: n ulps of the largest eigenvalue over the gaps).
class OtherRoundingDevice final : public ForwardingDevice {
public:
  OtherRoundingDevice() : ForwardingDevice(createCpuDevice()) {}
  Status gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              const float *b, float beta, float *c) override {
    DMUON_RETURN_IF_ERROR(ForwardingDevice::gemm(ta, tb, m, n, k, alpha, a, b, beta, c));
    for (int64_t i = 0; i < m * n; ++i)
      c[i] *= 1.f + 16.f * 0x1p-24f * valueAt(99, calls_, i);
    ++calls_;
    return Status::ok();
  }
  Status symmetricEigen(float *a, float *values, int64_t n) override {
    DMUON_RETURN_IF_ERROR(ForwardingDevice::symmetricEigen(a, values, n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        a[i * n + j] = (j % 2 ? -1.f : 1.f) * a[i * n + j] + 1e-6f * valueAt(98, calls_, i * n + j);
    ++calls_;
    return Status::ok();
  }

private:
  int calls_ = 0;
};

// Wrong kernels, one at a time.
enum class Bug { TransposedQ, RowsScaled, SecondMomentKept };
class BuggyDevice final : public ForwardingDevice {
public:
  explicit BuggyDevice(Bug bug) : ForwardingDevice(createCpuDevice()), bug_(bug) {}
  Status orthonormalize(float *a, int64_t n) override {
    DMUON_RETURN_IF_ERROR(ForwardingDevice::orthonormalize(a, n));
    if (bug_ == Bug::TransposedQ)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j)
          std::swap(a[i * n + j], a[j * n + i]);
    return Status::ok();
  }
  Status scaleColumns(float *x, int64_t r, int64_t c, const float *scales) override {
    if (bug_ != Bug::RowsScaled || r != c)
      return ForwardingDevice::scaleColumns(x, r, c, scales);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j)
        x[i * c + j] *= scales[i];
    return Status::ok();
  }
  Status adamDirection(float *out, const float *m, float *v, const float *g, int64_t n, float beta2,
                       float eps, float vScale) override {
    if (bug_ == Bug::SecondMomentKept && g) {
      // v as it was: a kernel that forgot to store its update.
      std::vector<float> kept(v, v + n);
      DMUON_RETURN_IF_ERROR(ForwardingDevice::adamDirection(out, m, v, g, n, beta2, eps, vScale));
      std::memcpy(v, kept.data(), static_cast<size_t>(n) * sizeof(float));
      return Status::ok();
    }
    return ForwardingDevice::adamDirection(out, m, v, g, n, beta2, eps, vScale);
  }

private:
  Bug bug_;
};

Trajectory cpuRun(Rule rule) {
  std::unique_ptr<Device> cpu = createCpuDevice();
  Trajectory t;
  Status s = runRule(*cpu, rule, t);
  EXPECT_TRUE(s.isOk()) << s.message();
  return t;
}

class PreconditionerRun : public ::testing::TestWithParam<Rule> {};

TEST_P(PreconditionerRun, ToleratesOtherRoundingAndEigenvectorSigns) {
  const Trajectory want = cpuRun(GetParam());
  OtherRoundingDevice dev;
  Trajectory got;
  Status s = runRule(dev, GetParam(), got);
  ASSERT_TRUE(s.isOk()) << s.message();
  const double err = updateError(got, want);
  std::printf("%s, other rounding and signs: update rel error %.2e (tolerance %.0e)\n",
              ruleName(GetParam()), err, kStepTolerance);
  EXPECT_GT(err, 0.0) << "the perturbation changed nothing: it tests nothing";
  EXPECT_LE(err, kStepTolerance / 5) << "too little margin for a correct GPU";
}

TEST_P(PreconditionerRun, CatchesWrongKernels) {
  const Trajectory want = cpuRun(GetParam());
  // Shampoo never orthonormalizes; SOAP never scales columns.
  const Bug bugs[] = {GetParam() == Rule::Soap ? Bug::TransposedQ : Bug::RowsScaled,
                      Bug::SecondMomentKept};
  for (Bug bug : bugs) {
    BuggyDevice dev(bug);
    Trajectory got;
    Status s = runRule(dev, GetParam(), got);
    ASSERT_TRUE(s.isOk()) << s.message();
    const double err = updateError(got, want);
    std::printf("%s, wrong kernel %d: update rel error %.2e\n", ruleName(GetParam()),
                static_cast<int>(bug), err);
    EXPECT_GT(err, 10 * kStepTolerance) << "bug " << static_cast<int>(bug) << " went unnoticed";
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, PreconditionerRun, ::testing::Values(Rule::Soap, Rule::Shampoo),
                         [](const auto &info) { return std::string(ruleName(info.param)); });

} // namespace
