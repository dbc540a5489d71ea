// The CUDA device's SOAP/Shampoo linear algebra (kernels/cuda/
// CudaLinearAlgebra.h, through runtime/devices/cuda/CudaDevice.cpp) against
// the CPU device on random inputs: GEMM in every transpose within fp32
// rounding, the eigendecomposition by its values, its vectors up to sign and
// its reconstruction, the QR's Q entry by entry (the same Householder
// convention), the element-wise kernels bit for bit; then whole SOAP and
// Shampoo runs (PreconditionerRun.h: 12 steps, 4 refreshes, a one-sided
// matrix) within kStepTolerance of the CPU's. Skipped without a GPU; the
// GPU bundle runs them (scripts/gpu-bundle).
#include "PreconditionerRun.h"
#include "devices/CpuDevice.h"
#include "devices/cuda/CudaDevice.h"
#include "kernels/cuda/CudaKernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

namespace {

using namespace dmuon::rt;
using namespace dmuon::rt::precond_test;

#define ASSERT_STATUS_OK(expr)                                                                     \
  do {                                                                                             \
    const Status s_ = (expr);                                                                      \
    ASSERT_TRUE(s_.isOk()) << #expr << ": " << s_.message();                                       \
  } while (0)

std::vector<float> randomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

double relFrobenius(const std::vector<float> &got, const std::vector<float> &want) {
  double d = 0, w = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    w += double(want[i]) * want[i];
  }
  return std::sqrt(d / std::max(w, 1e-300));
}

// The CUDA device on its own stream of device 0, and a CPU device.
class CudaPreconditioner : public ::testing::Test {
protected:
  void SetUp() override {
    if (dmuon::cuda::deviceCount() == 0)
      GTEST_SKIP() << "no CUDA device visible";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_STATUS_OK(createCudaDevice(0, stream_, gpu_));
    cpu_ = createCpuDevice();
  }
  void TearDown() override {
    gpu_.reset();
    if (stream_)
      cudaStreamDestroy(stream_);
  }

  // The same host values in an array of each device.
  struct Twin {
    DeviceArray gpu, cpu;
    size_t n = 0;
  };
  void twin(Twin &t, const std::vector<float> &values) {
    t.n = values.size();
    const size_t bytes = std::max<size_t>(1, t.n) * sizeof(float);
    ASSERT_STATUS_OK(t.gpu.allocate(*gpu_, bytes));
    ASSERT_STATUS_OK(t.cpu.allocate(*cpu_, bytes));
    ASSERT_STATUS_OK(gpu_->upload(t.gpu.floats(), values.data(), t.n * sizeof(float)));
    ASSERT_STATUS_OK(cpu_->upload(t.cpu.floats(), values.data(), t.n * sizeof(float)));
  }
  std::vector<float> onGpu(const Twin &t) {
    std::vector<float> v(t.n);
    Status s = gpu_->download(v.data(), t.gpu.floats(), t.n * sizeof(float));
    EXPECT_TRUE(s.isOk()) << s.message();
    return v;
  }
  std::vector<float> onCpu(const Twin &t) {
    return std::vector<float>(t.cpu.floats(), t.cpu.floats() + t.n);
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Device> gpu_, cpu_;
};

TEST_F(CudaPreconditioner, GemmMatchesCpuInEveryTranspose) {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape sh : {Shape{37, 23, 19}, Shape{130, 70, 90}, Shape{1, 5, 1}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        Twin a, b, c;
        twin(a, randomValues(static_cast<size_t>(sh.m * sh.k), 1));
        twin(b, randomValues(static_cast<size_t>(sh.k * sh.n), 2));
        twin(c, randomValues(static_cast<size_t>(sh.m * sh.n), 3));
        ASSERT_STATUS_OK(gpu_->gemm(ta, tb, sh.m, sh.n, sh.k, 0.7f, a.gpu.floats(), b.gpu.floats(),
                                    0.3f, c.gpu.floats()));
        ASSERT_STATUS_OK(cpu_->gemm(ta, tb, sh.m, sh.n, sh.k, 0.7f, a.cpu.floats(), b.cpu.floats(),
                                    0.3f, c.cpu.floats()));
        const double err = relFrobenius(onGpu(c), onCpu(c));
        std::printf("gemm %ldx%ldx%ld trans %d%d: rel error %.2e\n", long(sh.m), long(sh.n),
                    long(sh.k), ta, tb, err);
        EXPECT_LE(err, 1e-5) << sh.m << "x" << sh.n << "x" << sh.k << " transA " << ta << " transB "
                             << tb;
      }
}

// Q diag(lambda) Q^T for a random orthogonal Q and eigenvalues 1..n apart
// by 1 (a gap that fp32 resolves: eigenvectors comparable up to sign).
std::vector<float> symmetricWithSpacedSpectrum(Device &cpu, int64_t n, uint32_t seed) {
  std::vector<float> q = randomValues(static_cast<size_t>(n * n), seed);
  EXPECT_TRUE(cpu.orthonormalize(q.data(), n).isOk());
  std::vector<float> s(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < n; ++k)
        sum += double(q[i * n + k]) * double(1 + (k * 7) % n) * q[j * n + k];
      s[i * n + j] = static_cast<float>(sum);
    }
  for (int64_t i = 0; i < n; ++i) // exactly symmetric
    for (int64_t j = 0; j < i; ++j)
      s[i * n + j] = s[j * n + i];
  return s;
}

TEST_F(CudaPreconditioner, SymmetricEigenMatchesCpuUpToSign) {
  for (const int64_t n : {1, 48, 130}) {
    const std::vector<float> s = symmetricWithSpacedSpectrum(*cpu_, n, 5);
    Twin a, values;
    twin(a, s);
    twin(values, std::vector<float>(static_cast<size_t>(n), -1.f));
    ASSERT_STATUS_OK(gpu_->symmetricEigen(a.gpu.floats(), values.gpu.floats(), n));
    ASSERT_STATUS_OK(cpu_->symmetricEigen(a.cpu.floats(), values.cpu.floats(), n));
    const std::vector<float> q = onGpu(a), lambda = onGpu(values), qc = onCpu(a),
                             lc = onCpu(values);
    double valueErr = 0, worstDot = 1, orthoErr = 0, recon = 0, norm = 0;
    for (int64_t j = 0; j < n; ++j) {
      valueErr = std::max(valueErr, std::fabs(double(lambda[j]) - lc[j]) / double(n));
      if (j > 0) {
        EXPECT_GT(lambda[j - 1], lambda[j]) << "eigenvalues not descending at " << j;
      }
      double dot = 0;
      for (int64_t i = 0; i < n; ++i)
        dot += double(q[i * n + j]) * qc[i * n + j];
      worstDot = std::min(worstDot, std::fabs(dot));
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double qtq = 0, back = 0;
        for (int64_t k = 0; k < n; ++k) {
          qtq += double(q[k * n + i]) * q[k * n + j];
          back += double(q[i * n + k]) * lambda[k] * q[j * n + k];
        }
        orthoErr = std::max(orthoErr, std::fabs(qtq - (i == j ? 1 : 0)));
        recon += (back - s[i * n + j]) * (back - s[i * n + j]);
        norm += double(s[i * n + j]) * s[i * n + j];
      }
    recon = std::sqrt(recon / norm);
    std::printf("eigen %ld: values %.2e (of the largest), worst |dot| %.7f, Q^TQ %.2e, "
                "reconstruction %.2e\n",
                long(n), valueErr, worstDot, orthoErr, recon);
    // fp32 eigensolvers: errors of order n * 2^-24 relative to the largest.
    EXPECT_LE(valueErr, 5e-5) << n;
    EXPECT_GE(worstDot, 1 - 1e-4) << n << ": an eigenvector differs beyond its sign";
    EXPECT_LE(orthoErr, 5e-5) << n;
    EXPECT_LE(recon, 5e-5) << n;
  }
}

TEST_F(CudaPreconditioner, OrthonormalizeMatchesCpuEntryByEntry) {
  for (const int64_t n : {1, 40, 130}) {
    // 3I + noise: well conditioned, so Q is well defined to fp32 rounding,
    // and its R has a sign pattern a wrong convention would flip.
    std::vector<float> m = randomValues(static_cast<size_t>(n * n), 9);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        m[i * n + j] = (i == j ? 3.f : 0.f) + m[i * n + j] / std::sqrt(float(n));
    Twin a;
    twin(a, m);
    ASSERT_STATUS_OK(gpu_->orthonormalize(a.gpu.floats(), n));
    ASSERT_STATUS_OK(cpu_->orthonormalize(a.cpu.floats(), n));
    const std::vector<float> q = onGpu(a), qc = onCpu(a);
    double worst = 0;
    for (size_t i = 0; i < q.size(); ++i)
      worst = std::max(worst, std::fabs(double(q[i]) - qc[i]));
    std::printf("orthonormalize %ld: max entry difference %.2e\n", long(n), worst);
    EXPECT_LE(worst, 1e-4) << n; // a flipped sign convention is off by ~1
  }
}

// The element-wise kernels: the CPU's roundings, so the CPU's bits.
TEST_F(CudaPreconditioner, ElementwiseKernelsMatchCpuBitForBit) {
  const int64_t rows = 37, cols = 53, n = rows * cols;
  const auto same = [&](const Twin &t, const char *what) {
    const std::vector<float> g = onGpu(t), c = onCpu(t);
    for (size_t i = 0; i < c.size(); ++i)
      if (std::memcmp(&g[i], &c[i], sizeof(float)) != 0) {
        ADD_FAILURE() << what << ": element " << i << " is " << g[i] << " on the GPU, " << c[i]
                      << " on the CPU";
        return;
      }
  };
  std::vector<float> vInit = randomValues(static_cast<size_t>(n), 21);
  for (float &x : vInit)
    x = x * x;                          // a second moment is not negative
  for (const int variant : {0, 1, 2}) { // separate out, out == g, no g
    Twin out, m, v, g;
    twin(out, std::vector<float>(static_cast<size_t>(n), 0.f));
    twin(m, randomValues(static_cast<size_t>(n), 22));
    twin(v, vInit);
    twin(g, randomValues(static_cast<size_t>(n), 23));
    float *og = variant == 1 ? g.gpu.floats() : out.gpu.floats();
    float *oc = variant == 1 ? g.cpu.floats() : out.cpu.floats();
    ASSERT_STATUS_OK(gpu_->adamDirection(og, m.gpu.floats(), v.gpu.floats(),
                                         variant == 2 ? nullptr : g.gpu.floats(), n, 0.95f, 1e-8f,
                                         1.7f));
    ASSERT_STATUS_OK(cpu_->adamDirection(oc, m.cpu.floats(), v.cpu.floats(),
                                         variant == 2 ? nullptr : g.cpu.floats(), n, 0.95f, 1e-8f,
                                         1.7f));
    same(variant == 1 ? g : out, "adamDirection's direction");
    same(v, "adamDirection's second moment");
  }
  {
    Twin dst, src;
    twin(dst, randomValues(static_cast<size_t>(n), 24));
    twin(src, randomValues(static_cast<size_t>(n), 25));
    ASSERT_STATUS_OK(gpu_->decayAdd(dst.gpu.floats(), src.gpu.floats(), 0.9f, 0.1f, n));
    ASSERT_STATUS_OK(cpu_->decayAdd(dst.cpu.floats(), src.cpu.floats(), 0.9f, 0.1f, n));
    same(dst, "decayAdd");
  }
  {
    std::vector<float> values = randomValues(static_cast<size_t>(n), 29);
    values[0] = std::nanf(""); // stays NaN, for the step's finite check
    Twin x;
    twin(x, values);
    ASSERT_STATUS_OK(gpu_->clampMagnitude(x.gpu.floats(), n, 0.25f));
    ASSERT_STATUS_OK(cpu_->clampMagnitude(x.cpu.floats(), n, 0.25f));
    same(x, "clampMagnitude");
  }
  for (const bool columns : {false, true}) {
    std::vector<int64_t> order(static_cast<size_t>(columns ? cols : rows));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(26));
    Twin x, scratch;
    twin(x, randomValues(static_cast<size_t>(n), 27));
    twin(scratch, std::vector<float>(static_cast<size_t>(n), 0.f));
    ASSERT_STATUS_OK(
        gpu_->permute(x.gpu.floats(), rows, cols, order.data(), columns, scratch.gpu.floats()));
    ASSERT_STATUS_OK(
        cpu_->permute(x.cpu.floats(), rows, cols, order.data(), columns, scratch.cpu.floats()));
    order.assign(order.size(), 0); // the host's order may be reused at once
    same(x, columns ? "permute (columns)" : "permute (rows)");
  }
  {
    std::vector<float> scales = randomValues(static_cast<size_t>(cols), 28);
    Twin x;
    twin(x, randomValues(static_cast<size_t>(n), 29));
    ASSERT_STATUS_OK(gpu_->scaleColumns(x.gpu.floats(), rows, cols, scales.data()));
    ASSERT_STATUS_OK(cpu_->scaleColumns(x.cpu.floats(), rows, cols, scales.data()));
    scales.assign(scales.size(), 0.f);
    same(x, "scaleColumns");
  }
}

TEST_F(CudaPreconditioner, RefusesASideBeyondCuSolversSizesWithAMessage) {
  float *nothing = nullptr;
  const Status s = gpu_->symmetricEigen(nothing, nothing, 50000);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("beyond cuSOLVER's int sizes"), std::string::npos) << s.message();
  // The device still works afterwards.
  Twin a, values;
  twin(a, {4.f});
  twin(values, {0.f});
  ASSERT_STATUS_OK(gpu_->symmetricEigen(a.gpu.floats(), values.gpu.floats(), 1));
  EXPECT_EQ(onGpu(values)[0], 4.f);
}

class CudaPreconditionedSteps : public CudaPreconditioner,
                                public ::testing::WithParamInterface<Rule> {};

TEST_P(CudaPreconditionedSteps, MatchCpu) {
  Trajectory onGpuDevice, onCpuDevice;
  ASSERT_STATUS_OK(runRule(*gpu_, GetParam(), onGpuDevice));
  ASSERT_STATUS_OK(runRule(*cpu_, GetParam(), onCpuDevice));
  const double err = updateError(onGpuDevice, onCpuDevice);
  std::printf("%s, %d steps on CUDA vs CPU: update rel error %.2e (tolerance %.0e)\n",
              ruleName(GetParam()), kSteps, err, kStepTolerance);
  EXPECT_LE(err, kStepTolerance);
}

INSTANTIATE_TEST_SUITE_P(Rules, CudaPreconditionedSteps,
                         ::testing::Values(Rule::Soap, Rule::Shampoo),
                         [](const auto &info) { return std::string(ruleName(info.param)); });

} // namespace
