// Newton-Schulz on the CPU against a double-precision reference and against
// the SVD (LAPACKE) view of what it computes: the coefficient sets, the lr
// scale, every NS form's singular values. The Muon and AdamW steps are in
// StepKernelsTest.cpp.
#include "KernelTestSupport.h"
#include "kernels/cpu/MuonKernels.h"

#include <gtest/gtest.h>
#include <lapacke.h>

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

double relFrobError(const std::vector<float> &got, const std::vector<double> &want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// The composed scalar polynomial: x <- a x + b x^3 + c x^5 per iteration.
double composedPoly(double x, int steps, NsCoefficients set) {
  for (int it = 0; it < steps; ++it) {
    float a, b, c;
    k::nsCoefficients(set, it, a, b, c);
    const double x2 = x * x;
    x = x * (a + x2 * (b + c * x2));
  }
  return x;
}


// ---------------------------------------------------------------------------
// Coefficients and lr scale.

TEST(NsCoefficientsTest, OriginalIsConstant) {
  for (int it : {0, 1, 4, 7, 50}) {
    float a, b, c;
    k::nsCoefficients(NsCoefficients::Original, it, a, b, c);
    EXPECT_FLOAT_EQ(a, 3.4445f);
    EXPECT_FLOAT_EQ(b, -4.7750f);
    EXPECT_FLOAT_EQ(c, 2.0315f);
  }
  EXPECT_EQ(k::nsCoefficientCount(NsCoefficients::Original), 1);
  EXPECT_FLOAT_EQ(k::nsNormScale(NsCoefficients::Original), 1.0f);
}

TEST(NsCoefficientsTest, PolarExpressSafetyFactorAndTail) {
  EXPECT_EQ(k::nsCoefficientCount(NsCoefficients::PolarExpress), 8);
  EXPECT_FLOAT_EQ(k::nsNormScale(NsCoefficients::PolarExpress), 1.01f);
  float a, b, c;
  k::nsCoefficients(NsCoefficients::PolarExpress, 0, a, b, c);
  EXPECT_FLOAT_EQ(a, static_cast<float>(8.28721201814563 / 1.01));
  EXPECT_FLOAT_EQ(b, static_cast<float>(-23.595886519098837 / std::pow(1.01, 3)));
  EXPECT_FLOAT_EQ(c, static_cast<float>(17.300387312530933 / std::pow(1.01, 5)));
  // The last set is not scaled, and later iterations reuse it.
  for (int it : {7, 8, 20}) {
    k::nsCoefficients(NsCoefficients::PolarExpress, it, a, b, c);
    EXPECT_FLOAT_EQ(a, 1.875f);
    EXPECT_FLOAT_EQ(b, -1.25f);
    EXPECT_FLOAT_EQ(c, 0.375f);
  }
}

// The composed Polar Express polynomial is designed to approximate sign(x) on
// [1e-3, 1] (the paper's l = 1e-3) with an error that shrinks every
// iteration: a transcription error in any set breaks this.
TEST(NsCoefficientsTest, PolarExpressComposedPolynomialConverges) {
  const double scale = k::nsNormScale(NsCoefficients::PolarExpress);
  auto maxDev = [&](int steps, NsCoefficients set, double s) {
    double dev = 0.0;
    for (int i = 0; i <= 20000; ++i) {
      const double x = 1e-3 + (1.0 - 1e-3) * i / 20000.0;
      dev = std::max(dev, std::abs(composedPoly(x / s, steps, set) - 1.0));
    }
    return dev;
  };
  EXPECT_LT(maxDev(5, NsCoefficients::PolarExpress, scale), 0.17);
  EXPECT_LT(maxDev(6, NsCoefficients::PolarExpress, scale), 0.01);
  EXPECT_LT(maxDev(8, NsCoefficients::PolarExpress, scale), 1e-5); // fp32 coefficients
  EXPECT_LT(maxDev(10, NsCoefficients::PolarExpress, scale), 1e-5);
  // Jordan's quintic does not converge: it plateaus around 0.3.
  EXPECT_GT(maxDev(10, NsCoefficients::Original, 1.0), 0.25);
}

TEST(MuonLrScaleTest, Values) {
  EXPECT_FLOAT_EQ(k::muonLrScale(4, 2, false), std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(k::muonLrScale(2, 4, false), 1.0f);
  EXPECT_FLOAT_EQ(k::muonLrScale(7, 7, false), 1.0f);
  EXPECT_FLOAT_EQ(k::muonLrScale(4096, 1024, false), 2.0f);
  EXPECT_FLOAT_EQ(k::muonLrScale(3, 1, false), std::sqrt(3.0f));
  EXPECT_FLOAT_EQ(k::muonLrScale(4, 16, true), 0.8f);
  EXPECT_FLOAT_EQ(k::muonLrScale(16, 4, true), 0.8f);
  EXPECT_FLOAT_EQ(k::muonLrScale(100, 25, true), 2.0f);
  EXPECT_FLOAT_EQ(k::muonLrScale(1, 1, true), 0.2f);
}

// ---------------------------------------------------------------------------
// NS against the naive reference.

class NsVsNaive : public testing::TestWithParam<std::tuple<Shape, NsCoefficients>> {};

TEST_P(NsVsNaive, Matches) {
  const auto [shape, set] = GetParam();
  const auto g = gaussianMatrix(shape.rows, shape.cols,
                              static_cast<uint32_t>(shape.rows * 131 + shape.cols * 7 +
                                                    static_cast<int>(set)));
  NsWorkspace ws;
  for (int steps : {5, 10}) {
    std::vector<float> out(g.size(), std::numeric_limits<float>::quiet_NaN());
    k::newtonSchulz(g.data(), out.data(), shape.rows, shape.cols, steps, set, ws);
    const auto want = nsReference(toDouble(g), shape.rows, shape.cols, steps, set);
    EXPECT_LE(relFrobError(out, want), 1e-4) << shapeName(shape) << " steps " << steps;
  }
}

const Shape kNsShapes[] = {{16, 16}, {24, 40}, {40, 24}, {1, 33}, {33, 1},
                           {1, 1},   {64, 256}, {300, 70}, {2, 3}};

INSTANTIATE_TEST_SUITE_P(Shapes, NsVsNaive,
                         testing::Combine(testing::ValuesIn(kNsShapes),
                                          testing::Values(NsCoefficients::Original,
                                                          NsCoefficients::PolarExpress)),
                         [](const auto &info) {
                           return shapeName(std::get<0>(info.param)) + "_" +
                                  coefficientSetName(std::get<1>(info.param));
                         });

TEST(NsTest, InPlaceEqualsOutOfPlace) {
  for (Shape shape : {Shape{20, 50}, Shape{50, 20}, Shape{30, 30}}) {
    const auto g = gaussianMatrix(shape.rows, shape.cols, 5);
    NsWorkspace ws;
    std::vector<float> out(g.size());
    k::newtonSchulz(g.data(), out.data(), shape.rows, shape.cols, 5, NsCoefficients::Original,
                    ws);
    std::vector<float> inPlace = g;
    k::newtonSchulz(inPlace.data(), inPlace.data(), shape.rows, shape.cols, 5,
                    NsCoefficients::Original, ws);
    EXPECT_EQ(out, inPlace) << shapeName(shape);
  }
}

TEST(NsTest, ZeroStepsIsNormalization) {
  const auto g = gaussianMatrix(7, 3, 9);
  NsWorkspace ws;
  std::vector<float> out(g.size());
  k::newtonSchulz(g.data(), out.data(), 7, 3, 0, NsCoefficients::Original, ws);
  double sumSq = 0.0;
  for (float v : out)
    sumSq += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(sumSq), 1.0, 1e-6);
  EXPECT_NEAR(out[4], g[4] / std::sqrt([&] {
                double s = 0;
                for (float v : g)
                  s += static_cast<double>(v) * v;
                return s;
              }()),
              1e-6);
}

TEST(NsTest, WorkspaceGrowsOnlyWhenTooSmall) {
  NsWorkspace ws;
  auto big = gaussianMatrix(64, 32, 1);
  k::newtonSchulz(big.data(), big.data(), 64, 32, 5, NsCoefficients::Original, ws);
  EXPECT_EQ(ws.buffer.size(), static_cast<size_t>(k::nsWorkspaceFloats(64, 32)));
  const float *data = ws.buffer.data();
  const size_t size = ws.buffer.size();
  auto small = gaussianMatrix(8, 16, 2);
  k::newtonSchulz(small.data(), small.data(), 8, 16, 5, NsCoefficients::Original, ws);
  EXPECT_EQ(ws.buffer.data(), data);
  EXPECT_EQ(ws.buffer.size(), size);
}

TEST(NsTest, ZeroInputGivesZeroNotNaN) {
  for (Shape shape : {Shape{8, 8}, Shape{4, 12}, Shape{12, 4}, Shape{1, 5}}) {
    for (auto set : {NsCoefficients::Original, NsCoefficients::PolarExpress}) {
      std::vector<float> g(static_cast<size_t>(shape.rows * shape.cols), 0.0f);
      std::vector<float> out(g.size(), 1.0f);
      NsWorkspace ws;
      k::newtonSchulz(g.data(), out.data(), shape.rows, shape.cols, 5, set, ws);
      for (float v : out)
        ASSERT_EQ(v, 0.0f) << shapeName(shape) << " " << coefficientSetName(set);
    }
  }
}

// ---------------------------------------------------------------------------
// NS against the polar factor: with G = U S V^T (thin SVD) and x = S / (s ||G||_F
// + 1e-7), exact arithmetic gives NS(G) = U f(x) V^T for the composed scalar
// polynomial f.

struct Svd {
  std::vector<double> u, s, vt; // u: rows x r, s: r, vt: r x cols (row-major)
};

Svd svd(std::vector<double> a, int64_t rows, int64_t cols) {
  const int64_t r = std::min(rows, cols);
  Svd out;
  out.u.resize(static_cast<size_t>(rows * r));
  out.s.resize(static_cast<size_t>(r));
  out.vt.resize(static_cast<size_t>(r * cols));
  std::vector<double> superb(static_cast<size_t>(std::max<int64_t>(r, 2)));
  const lapack_int info = LAPACKE_dgesvd(
      LAPACK_ROW_MAJOR, 'S', 'S', static_cast<lapack_int>(rows), static_cast<lapack_int>(cols),
      a.data(), static_cast<lapack_int>(cols), out.s.data(), out.u.data(),
      static_cast<lapack_int>(r), out.vt.data(), static_cast<lapack_int>(cols), superb.data());
  EXPECT_EQ(info, 0);
  return out;
}

std::vector<double> singularValues(std::vector<double> a, int64_t rows, int64_t cols) {
  const int64_t r = std::min(rows, cols);
  std::vector<double> s(static_cast<size_t>(r));
  std::vector<double> superb(static_cast<size_t>(std::max<int64_t>(r, 2)));
  double dummy = 0.0;
  const lapack_int info = LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N',
                                         static_cast<lapack_int>(rows),
                                         static_cast<lapack_int>(cols), a.data(),
                                         static_cast<lapack_int>(cols), s.data(), &dummy, 1,
                                         &dummy, 1, superb.data());
  EXPECT_EQ(info, 0);
  return s;
}

// Every form (kernels/Hyper.h NsForm) is checked, not only the one Auto picks
// at these small shapes.
class NsVsPolar
    : public testing::TestWithParam<std::tuple<Shape, NsCoefficients, dmuon::kernels::NsForm>> {};

TEST_P(NsVsPolar, SingularValuesFollowComposedPolynomial) {
  const auto [shape, set, form] = GetParam();
  const int64_t rows = shape.rows, cols = shape.cols, r = std::min(rows, cols);
  constexpr int kSteps = 5;
  constexpr double kTol = 1e-3;
  const auto g = gaussianMatrix(rows, cols, static_cast<uint32_t>(rows * 17 + cols));
  NsWorkspace ws;
  std::vector<float> out(g.size());
  k::newtonSchulz(g.data(), out.data(), rows, cols, kSteps, set, ws, form);

  const auto gd = toDouble(g);
  double fro = 0.0;
  for (double v : gd)
    fro += v * v;
  fro = std::sqrt(fro);
  const double denom = static_cast<double>(k::nsNormScale(set)) * fro + 1e-7;
  const Svd in = svd(gd, rows, cols);

  // f over (0, 1]: the band every output singular value must lie in.
  double bandLo = std::numeric_limits<double>::infinity(), bandHi = -bandLo;
  constexpr int kSamples = 100000;
  for (int i = 1; i <= kSamples; ++i) {
    const double f = composedPoly(static_cast<double>(i) / kSamples, kSteps, set);
    bandLo = std::min(bandLo, f);
    bandHi = std::max(bandHi, f);
  }
  bandLo = std::min(bandLo, 0.0); // f(x) -> 0 as x -> 0

  std::vector<double> want(static_cast<size_t>(r));
  double maxDev = 0.0; // max |f(x_i) - 1|
  for (int64_t i = 0; i < r; ++i) {
    want[static_cast<size_t>(i)] = composedPoly(in.s[static_cast<size_t>(i)] / denom, kSteps, set);
    maxDev = std::max(maxDev, std::abs(want[static_cast<size_t>(i)] - 1.0));
  }

  // 1. U^T out V is diagonal with f(x_i) on the diagonal.
  const auto od = toDouble(out);
  double maxDiag = 0.0, maxOff = 0.0;
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < r; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < rows; ++p) {
        double row = 0.0;
        for (int64_t q = 0; q < cols; ++q)
          row += od[static_cast<size_t>(p * cols + q)] * in.vt[static_cast<size_t>(j * cols + q)];
        acc += in.u[static_cast<size_t>(p * r + i)] * row;
      }
      if (i == j)
        maxDiag = std::max(maxDiag, std::abs(acc - want[static_cast<size_t>(i)]));
      else
        maxOff = std::max(maxOff, std::abs(acc));
    }
  EXPECT_LE(maxDiag, kTol);
  EXPECT_LE(maxOff, kTol);

  // 2. The output's singular values are f of the input's normalized ones.
  auto got = singularValues(od, rows, cols);
  auto wantAbs = want;
  for (double &w : wantAbs)
    w = std::abs(w);
  std::sort(got.begin(), got.end());
  std::sort(wantAbs.begin(), wantAbs.end());
  for (int64_t i = 0; i < r; ++i) {
    const double sv = got[static_cast<size_t>(i)];
    EXPECT_NEAR(sv, wantAbs[static_cast<size_t>(i)], kTol) << "singular value " << i;
    EXPECT_GE(sv, bandLo - kTol);
    EXPECT_LE(sv, bandHi + kTol);
  }

  // 3. ||NS(G) - U V^T||_2 = max_i |f(x_i) - 1|.
  std::vector<double> diff = od;
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t q = 0; q < cols; ++q) {
      double uv = 0.0;
      for (int64_t i = 0; i < r; ++i)
        uv += in.u[static_cast<size_t>(p * r + i)] * in.vt[static_cast<size_t>(i * cols + q)];
      diff[static_cast<size_t>(p * cols + q)] -= uv;
    }
  const auto ds = singularValues(diff, rows, cols);
  const double dist = *std::max_element(ds.begin(), ds.end());
  EXPECT_LE(dist, maxDev + kTol);
  EXPECT_GE(dist, maxDev - kTol);
}

const Shape kPolarShapes[] = {{32, 32}, {24, 64}, {64, 24}, {1, 40}, {40, 1}, {48, 100}};

INSTANTIATE_TEST_SUITE_P(Shapes, NsVsPolar,
                         testing::Combine(testing::ValuesIn(kPolarShapes),
                                          testing::Values(NsCoefficients::Original,
                                                          NsCoefficients::PolarExpress),
                                          testing::Values(dmuon::kernels::NsForm::ThreeGemm,
                                                          dmuon::kernels::NsForm::Symmetric,
                                                          dmuon::kernels::NsForm::Gram)),
                         [](const auto &info) {
                           const auto form = std::get<2>(info.param);
                           return shapeName(std::get<0>(info.param)) + "_" +
                                  coefficientSetName(std::get<1>(info.param)) + "_" +
                                  (form == dmuon::kernels::NsForm::ThreeGemm   ? "ThreeGemm"
                                   : form == dmuon::kernels::NsForm::Symmetric ? "Symmetric"
                                                                               : "Gram");
                         });

TEST(NsPolarTest, PolarExpressConvergesOriginalPlateaus) {
  // Singular values spread over [0.6, 3] put the normalized spectrum inside
  // [1e-3, 1]: 8 Polar Express iterations reach the polar factor U V^T to fp32
  // accuracy; Jordan's quintic stays ~0.3 away however long it runs.
  const int64_t n = 24;
  const auto q1 = svd(toDouble(gaussianMatrix(n, n, 11)), n, n);
  const auto q2 = svd(toDouble(gaussianMatrix(n, n, 12)), n, n);
  std::vector<double> gd(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double sigma = 3.0 * (0.2 + 0.8 * static_cast<double>(i) / (n - 1));
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = 0; q < n; ++q)
        gd[static_cast<size_t>(p * n + q)] +=
            q1.u[static_cast<size_t>(p * n + i)] * sigma * q2.vt[static_cast<size_t>(i * n + q)];
  }
  const std::vector<float> g(gd.begin(), gd.end());
  NsWorkspace ws;
  auto maxDev = [&](NsCoefficients set, int steps) {
    std::vector<float> out(g.size());
    k::newtonSchulz(g.data(), out.data(), n, n, steps, set, ws);
    double dev = 0.0;
    for (double s : singularValues(toDouble(out), n, n))
      dev = std::max(dev, std::abs(s - 1.0));
    return dev;
  };
  EXPECT_LT(maxDev(NsCoefficients::PolarExpress, 8), 1e-4);
  EXPECT_LT(maxDev(NsCoefficients::PolarExpress, 10), 1e-4);
  EXPECT_GT(maxDev(NsCoefficients::Original, 10), 0.1);
}

} // namespace
