// What the CPU kernel tests share: seeded Gaussian inputs, test-name
// spellings, and Newton-Schulz in double precision, the reference every NS
// form and the Muon step are checked against.
#ifndef DMUON_TEST_UNIT_KERNELTESTSUPPORT_H
#define DMUON_TEST_UNIT_KERNELTESTSUPPORT_H

#include "kernels/cpu/MuonKernels.h"

#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace dmuon::kernel_test {

// rows x cols values drawn from N(0, stddev^2), the same for the same seed.
inline std::vector<float> gaussianMatrix(int64_t rows, int64_t cols, uint32_t seed,
                                         float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (float &x : m)
    x = dist(rng);
  return m;
}

inline std::vector<double> toDouble(const std::vector<float> &v) { return {v.begin(), v.end()}; }

inline const char *coefficientSetName(kernels::NsCoefficients set) {
  return set == kernels::NsCoefficients::Original ? "Original" : "PolarExpress";
}

struct Shape {
  int64_t rows, cols;
};

inline std::string shapeName(const Shape &s) {
  return std::to_string(s.rows) + "x" + std::to_string(s.cols);
}

inline void PrintTo(const Shape &s, std::ostream *os) { *os << shapeName(s); }

// The three-GEMM iteration in double (cblas_dgemm) on the wide orientation,
// with the kernels' normalization: G / (scale * ||G||_F + 1e-7), then per
// iteration X <- a X + (b A + c A^2) X with A = X X^T.
inline std::vector<double> nsReference(const std::vector<double> &g, int64_t rows, int64_t cols,
                                       int steps, kernels::NsCoefficients set) {
  const bool tall = rows > cols;
  const int s = static_cast<int>(std::min(rows, cols));
  const int l = static_cast<int>(std::max(rows, cols));
  double sumSq = 0.0;
  for (double v : g)
    sumSq += v * v;
  const double denom = static_cast<double>(kernels::nsNormScale(set)) * std::sqrt(sumSq) + 1e-7;
  std::vector<double> x(g.size()), a(static_cast<size_t>(s) * s), b(a.size()), y(g.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      x[static_cast<size_t>(tall ? j * l + i : i * l + j)] =
          g[static_cast<size_t>(i * cols + j)] / denom;
  for (int it = 0; it < steps; ++it) {
    float ca, cb, cc;
    kernels::nsCoefficients(set, it, ca, cb, cc);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, l, 1.0, x.data(), l, x.data(), l,
                0.0, a.data(), s);
    b = a;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, s, s, cc, a.data(), s, a.data(), s,
                cb, b.data(), s);
    y = x;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, l, s, 1.0, b.data(), s, x.data(), l,
                ca, y.data(), l);
    x.swap(y);
  }
  std::vector<double> out(g.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[static_cast<size_t>(i * cols + j)] =
          x[static_cast<size_t>(tall ? j * l + i : i * l + j)];
  return out;
}

} // namespace dmuon::kernel_test

#endif
