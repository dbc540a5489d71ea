// CPU optimizer kernels against naive double-precision references and against
// the SVD (LAPACKE) view of what Newton-Schulz computes.
#include "kernels/cpu/MuonKernels.h"

#include <gtest/gtest.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace {

using dmuon::kernels::AdamWHyper;
using dmuon::kernels::MuonHyper;
using dmuon::kernels::NsCoefficients;
using dmuon::kernels::NsWorkspace;
namespace k = dmuon::kernels;

std::vector<float> randomMatrix(int64_t rows, int64_t cols, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (float &x : m)
    x = dist(rng);
  return m;
}

const char *setName(NsCoefficients set) {
  return set == NsCoefficients::Original ? "Original" : "PolarExpress";
}

// ---------------------------------------------------------------------------
// Naive double-precision Newton-Schulz: the same iteration with triple loops.

std::vector<double> naiveNs(const std::vector<double> &g, int64_t rows, int64_t cols, int steps,
                            NsCoefficients set) {
  const bool tr = rows > cols;
  const int64_t s = tr ? cols : rows;
  const int64_t l = tr ? rows : cols;
  double sumSq = 0.0;
  for (double v : g)
    sumSq += v * v;
  const double denom = static_cast<double>(k::nsNormScale(set)) * std::sqrt(sumSq) + 1e-7;
  std::vector<double> x(static_cast<size_t>(s * l));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double v = g[static_cast<size_t>(i * cols + j)] / denom;
      if (tr)
        x[static_cast<size_t>(j * l + i)] = v;
      else
        x[static_cast<size_t>(i * l + j)] = v;
    }
  std::vector<double> a(static_cast<size_t>(s * s)), b(a.size()), nx(x.size());
  for (int it = 0; it < steps; ++it) {
    float ca, cb, cc;
    k::nsCoefficients(set, it, ca, cb, cc);
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < s; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < l; ++p)
          acc += x[static_cast<size_t>(i * l + p)] * x[static_cast<size_t>(j * l + p)];
        a[static_cast<size_t>(i * s + j)] = acc;
      }
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < s; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < s; ++p)
          acc += a[static_cast<size_t>(i * s + p)] * a[static_cast<size_t>(p * s + j)];
        b[static_cast<size_t>(i * s + j)] = cb * a[static_cast<size_t>(i * s + j)] + cc * acc;
      }
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < l; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < s; ++p)
          acc += b[static_cast<size_t>(i * s + p)] * x[static_cast<size_t>(p * l + j)];
        nx[static_cast<size_t>(i * l + j)] = ca * x[static_cast<size_t>(i * l + j)] + acc;
      }
    x.swap(nx);
  }
  std::vector<double> out(g.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[static_cast<size_t>(i * cols + j)] =
          tr ? x[static_cast<size_t>(j * l + i)] : x[static_cast<size_t>(i * l + j)];
  return out;
}

std::vector<double> toDouble(const std::vector<float> &v) { return {v.begin(), v.end()}; }

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

struct Shape {
  int64_t rows, cols;
};

std::string shapeName(const Shape &s) {
  return std::to_string(s.rows) + "x" + std::to_string(s.cols);
}

void PrintTo(const Shape &s, std::ostream *os) { *os << shapeName(s); }

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
  const auto g = randomMatrix(shape.rows, shape.cols,
                              static_cast<uint32_t>(shape.rows * 131 + shape.cols * 7 +
                                                    static_cast<int>(set)));
  NsWorkspace ws;
  for (int steps : {5, 10}) {
    std::vector<float> out(g.size(), std::numeric_limits<float>::quiet_NaN());
    k::newtonSchulz(g.data(), out.data(), shape.rows, shape.cols, steps, set, ws);
    const auto want = naiveNs(toDouble(g), shape.rows, shape.cols, steps, set);
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
                                  setName(std::get<1>(info.param));
                         });

TEST(NsTest, InPlaceEqualsOutOfPlace) {
  for (Shape shape : {Shape{20, 50}, Shape{50, 20}, Shape{30, 30}}) {
    const auto g = randomMatrix(shape.rows, shape.cols, 5);
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
  const auto g = randomMatrix(7, 3, 9);
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
  auto big = randomMatrix(64, 32, 1);
  k::newtonSchulz(big.data(), big.data(), 64, 32, 5, NsCoefficients::Original, ws);
  EXPECT_EQ(ws.buffer.size(), static_cast<size_t>(k::nsWorkspaceFloats(64, 32)));
  const float *data = ws.buffer.data();
  const size_t size = ws.buffer.size();
  auto small = randomMatrix(8, 16, 2);
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
        ASSERT_EQ(v, 0.0f) << shapeName(shape) << " " << setName(set);
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
  const auto g = randomMatrix(rows, cols, static_cast<uint32_t>(rows * 17 + cols));
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
                                  setName(std::get<1>(info.param)) + "_" +
                                  (form == dmuon::kernels::NsForm::ThreeGemm   ? "ThreeGemm"
                                   : form == dmuon::kernels::NsForm::Symmetric ? "Symmetric"
                                                                               : "Gram");
                         });

TEST(NsPolarTest, PolarExpressConvergesOriginalPlateaus) {
  // Singular values spread over [0.6, 3] put the normalized spectrum inside
  // [1e-3, 1]: 8 Polar Express iterations reach the polar factor U V^T to fp32
  // accuracy; Jordan's quintic stays ~0.3 away however long it runs.
  const int64_t n = 24;
  const auto q1 = svd(toDouble(randomMatrix(n, n, 11)), n, n);
  const auto q2 = svd(toDouble(randomMatrix(n, n, 12)), n, n);
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
    const auto o = naiveNs(u, rows, cols, h.nsSteps, h.coefficients);
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
  auto p = randomMatrix(total, 1, 100);
  std::vector<float> buf(static_cast<size_t>(total), 0.0f);
  auto pRef = toDouble(p);
  std::vector<double> bufRef(static_cast<size_t>(total), 0.0);
  NsWorkspace ws;
  for (int step = 0; step < 4; ++step) {
    const auto g = randomMatrix(total, 1, 200 + static_cast<uint32_t>(step), 0.1f);
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
  auto p = randomMatrix(rows, cols, 3);
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
  auto p = randomMatrix(batch * rows, cols, 7);
  auto g = randomMatrix(batch * rows, cols, 8);
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
  auto g = randomMatrix(1, n, 21);
  auto buf0 = randomMatrix(1, n, 22);
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
  auto g = randomMatrix(rows, cols, 23);
  auto p = randomMatrix(rows, cols, 24);
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
  auto p = randomMatrix(n, 1, 21);
  std::vector<float> m(static_cast<size_t>(n), 0.0f), v(m.size(), 0.0f);
  auto pr = toDouble(p);
  std::vector<double> mr(m.size(), 0.0), vr(m.size(), 0.0);
  const double b1 = h.beta1, b2 = h.beta2, lr = h.lr, eps = h.eps, wd = h.weightDecay;
  for (int64_t step = 1; step <= 6; ++step) {
    auto g = randomMatrix(n, 1, 30 + static_cast<uint32_t>(step), 0.5f);
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
