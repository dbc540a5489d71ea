// The CPU Muon step (momentum, NS, lr scale, weight decay) and AdamW step
// against scalar double references (torch.optim formulas).
#include "KernelTestSupport.h"
#include "kernels/cpu/MuonKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace {

using dmuon::kernels::AdamWHyper;
using dmuon::kernels::MuonHyper;
using dmuon::kernels::NsCoefficients;
using dmuon::kernels::NsWorkspace;
namespace k = dmuon::kernels;
using namespace dmuon::kernel_test;

// ---------------------------------------------------------------------------
// muonStep against a scalar double reference.

void refMuonStep(std::vector<double> &p, std::vector<double> &buf, const std::vector<double> &g,
                 int64_t batch, int64_t rows, int64_t cols, const MuonHyper &h) {
  const int64_t n = rows * cols;
  const double mu = h.momentum;
  const double scale = h.matchRmsAdamW
                           ? 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)))
                           : std::sqrt(std::max(1.0, static_cast<double>(rows) / cols));
  for (int64_t bi = 0; bi < batch; ++bi) {
    std::vector<double> u(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const auto idx = static_cast<size_t>(bi * n + i);
      buf[idx] = mu * buf[idx] + g[idx];
      u[static_cast<size_t>(i)] = h.nesterov ? g[idx] + mu * buf[idx] : buf[idx];
    }
    const auto o = nsReference(u, rows, cols, h.nsSteps, h.coefficients);
    for (int64_t i = 0; i < n; ++i) {
      const auto idx = static_cast<size_t>(bi * n + i);
      p[idx] = p[idx] * (1.0 - static_cast<double>(h.lr) * h.weightDecay);
      p[idx] -= static_cast<double>(h.lr) * scale * o[static_cast<size_t>(i)];
    }
  }
}

struct MuonCase {
  const char *name;
  int64_t batch, rows, cols;
  bool nesterov;
  float weightDecay;
  bool matchRms;
  NsCoefficients set;
};

void PrintTo(const MuonCase &c, std::ostream *os) { *os << c.name; }

class MuonStepVsRef : public testing::TestWithParam<MuonCase> {};

TEST_P(MuonStepVsRef, Matches) {
  const MuonCase c = GetParam();
  MuonHyper h;
  h.lr = 0.05f;
  h.momentum = 0.95f;
  h.weightDecay = c.weightDecay;
  h.nesterov = c.nesterov;
  h.matchRmsAdamW = c.matchRms;
  h.coefficients = c.set;
  const int64_t total = c.batch * c.rows * c.cols;
  auto p = gaussianMatrix(total, 1, 100);
  std::vector<float> buf(static_cast<size_t>(total), 0.0f);
  auto pRef = toDouble(p);
  std::vector<double> bufRef(static_cast<size_t>(total), 0.0);
  NsWorkspace ws;
  for (int step = 0; step < 4; ++step) {
    const auto g = gaussianMatrix(total, 1, 200 + static_cast<uint32_t>(step), 0.1f);
    k::muonStep(p.data(), buf.data(), g.data(), c.batch, c.rows, c.cols, h, ws);
    refMuonStep(pRef, bufRef, toDouble(g), c.batch, c.rows, c.cols, h);
    double maxP = 0.0, maxBuf = 0.0;
    for (size_t i = 0; i < p.size(); ++i) {
      maxP = std::max(maxP, std::abs(static_cast<double>(p[i]) - pRef[i]));
      maxBuf = std::max(maxBuf, std::abs(static_cast<double>(buf[i]) - bufRef[i]) /
                                    std::max(1.0, std::abs(bufRef[i])));
    }
    // p is O(1) (float rounding ~2e-7); the update lr*scale*NS(u) carries
    // fp32 NS error (~3e-6 relative). Measured: <= 7e-7.
    EXPECT_LE(maxP, 5e-6) << "step " << step;
    EXPECT_LE(maxBuf, 1e-6) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MuonStepVsRef,
    testing::Values(MuonCase{"b1_nesterov", 1, 12, 20, true, 0.0f, false, NsCoefficients::Original},
                    MuonCase{"b1_plain_wd", 1, 20, 12, false, 0.1f, false,
                             NsCoefficients::Original},
                    MuonCase{"b3_nesterov_wd", 3, 16, 8, true, 0.1f, false,
                             NsCoefficients::Original},
                    MuonCase{"b3_plain", 3, 8, 16, false, 0.0f, false, NsCoefficients::Original},
                    MuonCase{"b1_rms", 1, 24, 10, true, 0.01f, true, NsCoefficients::Original},
                    MuonCase{"b3_rms_plain", 3, 10, 24, false, 0.1f, true,
                             NsCoefficients::Original},
                    MuonCase{"b3_polar", 3, 18, 18, true, 0.1f, false,
                             NsCoefficients::PolarExpress},
                    MuonCase{"b1_vector_row", 1, 1, 32, true, 0.0f, false,
                             NsCoefficients::Original},
                    MuonCase{"b3_vector_col", 3, 32, 1, false, 0.1f, true,
                             NsCoefficients::Original}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(MuonStepTest, ZeroGradientOnlyDecays) {
  MuonHyper h;
  h.weightDecay = 0.1f;
  const int64_t rows = 6, cols = 9;
  auto p = gaussianMatrix(rows, cols, 3);
  const auto p0 = p;
  std::vector<float> buf(p.size(), 0.0f), g(p.size(), 0.0f);
  NsWorkspace ws;
  k::muonStep(p.data(), buf.data(), g.data(), 1, rows, cols, h, ws);
  const auto decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weightDecay);
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_FALSE(std::isnan(p[i]));
    EXPECT_EQ(p[i], p0[i] * decay);
    EXPECT_EQ(buf[i], 0.0f);
  }
}

TEST(MuonStepTest, BatchEqualsSeparateMatrices) {
  const int64_t batch = 3, rows = 10, cols = 14, n = rows * cols;
  MuonHyper h;
  h.weightDecay = 0.05f;
  auto p = gaussianMatrix(batch * rows, cols, 7);
  auto g = gaussianMatrix(batch * rows, cols, 8);
  std::vector<float> buf(p.size(), 0.5f);
  auto pSep = p;
  auto bufSep = buf;
  NsWorkspace ws;
  k::muonStep(p.data(), buf.data(), g.data(), batch, rows, cols, h, ws);
  for (int64_t bi = 0; bi < batch; ++bi)
    k::muonStep(pSep.data() + bi * n, bufSep.data() + bi * n, g.data() + bi * n, 1, rows, cols, h,
                ws);
  EXPECT_EQ(p, pSep);
  EXPECT_EQ(buf, bufSep);
}

// The EMA (torch.optim.Muon) form: buf <- mu*buf + (1-mu)*g and Nesterov input
// (1-mu)*g + mu*buf, element by element; the default form is untouched by it.
TEST(MuonMomentumTest, EmaFormIsTorchsLerp) {
  const int64_t n = 257;
  auto g = gaussianMatrix(1, n, 21);
  auto buf0 = gaussianMatrix(1, n, 22);
  for (bool nesterov : {true, false}) {
    MuonHyper h;
    h.nesterov = nesterov;
    h.emaMomentum = true;
    std::vector<float> buf = buf0, u(n);
    k::muonMomentum(buf.data(), g.data(), u.data(), n, h);
    const float mu = h.momentum, gw = static_cast<float>(1.0 - static_cast<double>(mu));
    for (int64_t i = 0; i < n; ++i) {
      const float b = mu * buf0[i] + gw * g[i];
      ASSERT_EQ(buf[i], b) << i;
      ASSERT_EQ(u[i], nesterov ? gw * g[i] + mu * b : b) << i;
    }
    h.emaMomentum = false;
    buf = buf0;
    k::muonMomentum(buf.data(), g.data(), u.data(), n, h);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(buf[i], mu * buf0[i] + g[i]) << i;
  }
}

// From a zero buffer the two forms give the same update up to NS's epsilon.
TEST(MuonMomentumTest, EmaAndSgdFormsGiveTheSameFirstUpdate) {
  const int64_t rows = 12, cols = 20;
  auto g = gaussianMatrix(rows, cols, 23);
  auto p = gaussianMatrix(rows, cols, 24);
  auto pEma = p;
  std::vector<float> buf(p.size(), 0.0f), bufEma(p.size(), 0.0f);
  MuonHyper h, hEma;
  hEma.emaMomentum = true;
  NsWorkspace ws;
  k::muonStep(p.data(), buf.data(), g.data(), 1, rows, cols, h, ws);
  k::muonStep(pEma.data(), bufEma.data(), g.data(), 1, rows, cols, hEma, ws);
  for (size_t i = 0; i < p.size(); ++i)
    EXPECT_NEAR(p[i], pEma[i], 1e-5) << i;
}

// ---------------------------------------------------------------------------
// AdamW against a scalar double reference (torch.optim.AdamW formulas).

TEST(AdamWTest, MatchesReferenceOverSteps) {
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weightDecay = 0.1f;
  const int64_t n = 257;
  auto p = gaussianMatrix(n, 1, 21);
  std::vector<float> m(static_cast<size_t>(n), 0.0f), v(m.size(), 0.0f);
  auto pr = toDouble(p);
  std::vector<double> mr(m.size(), 0.0), vr(m.size(), 0.0);
  const double b1 = h.beta1, b2 = h.beta2, lr = h.lr, eps = h.eps, wd = h.weightDecay;
  for (int64_t step = 1; step <= 6; ++step) {
    auto g = gaussianMatrix(n, 1, 30 + static_cast<uint32_t>(step), 0.5f);
    if (step == 3)
      g[0] = 0.0f; // exercise a zero entry
    k::adamwStep(p.data(), m.data(), v.data(), g.data(), n, step, h);
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
    for (size_t i = 0; i < pr.size(); ++i) {
      const double gi = g[i];
      pr[i] *= 1.0 - lr * wd;
      mr[i] = b1 * mr[i] + (1.0 - b1) * gi;
      vr[i] = b2 * vr[i] + (1.0 - b2) * gi * gi;
      pr[i] -= lr * (mr[i] / bc1) / (std::sqrt(vr[i] / bc2) + eps);
    }
    for (size_t i = 0; i < pr.size(); ++i) {
      ASSERT_NEAR(p[i], pr[i], 1e-5 * std::max(1.0, std::abs(pr[i]))) << "step " << step;
      ASSERT_NEAR(m[i], mr[i], 1e-6 * std::max(1.0, std::abs(mr[i])));
      ASSERT_NEAR(v[i], vr[i], 1e-6 * std::max(1.0, std::abs(vr[i])));
    }
  }
}

TEST(AdamWTest, FirstStepMovesByLr) {
  // With bias correction the first step is lr * sign(g) (up to eps), after decay.
  AdamWHyper h;
  h.lr = 1e-3f;
  h.weightDecay = 0.0f;
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, m(3, 0.0f), v(3, 0.0f);
  const std::vector<float> g = {0.3f, -7.0f, 1e-3f};
  k::adamwStep(p.data(), m.data(), v.data(), g.data(), 3, 1, h);
  EXPECT_NEAR(p[0], 1.0f - 1e-3f, 1e-6);
  EXPECT_NEAR(p[1], -2.0f + 1e-3f, 1e-6);
  EXPECT_NEAR(p[2], 0.5f - 1e-3f, 1e-6);
}

TEST(AdamWTest, ZeroGradientNoNaN) {
  AdamWHyper h;
  h.weightDecay = 0.01f;
  std::vector<float> p = {1.0f, 2.0f}, m(2, 0.0f), v(2, 0.0f), g(2, 0.0f);
  k::adamwStep(p.data(), m.data(), v.data(), g.data(), 2, 1, h);
  for (float x : p)
    EXPECT_FALSE(std::isnan(x));
  EXPECT_FLOAT_EQ(p[0], static_cast<float>(1.0 - 1e-3 * 0.01));
}

} // namespace
