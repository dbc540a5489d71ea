// Newton-Schulz coefficient sets and the Polar Express safety factor, shared
// by the CPU kernels (kernels/cpu) and the CUDA kernels (kernels/cuda) so the
// two paths run the same polynomials. Plain C++17, header-only, no
// dependencies: nvcc compiles it in host code.
#ifndef DMUON_KERNELS_NSCOEFFICIENTS_H
#define DMUON_KERNELS_NSCOEFFICIENTS_H

namespace dmuon::kernels::ns {

struct Coeffs {
  double a, b, c;
};

// Keller Jordan's quintic, used unchanged on every iteration (torch.optim.Muon
// defaults).
inline constexpr Coeffs kOriginal = {3.4445, -4.7750, 2.0315};

// The Polar Express degree-5 coefficient sets, one per iteration, as given in
// Algorithm 1 of N. Amsel, D. Persson, C. Musco, R. M. Gower, "The Polar
// Express: Optimal Matrix Sign Methods and Their Application to the Muon
// Algorithm", arXiv:2505.16932 (2025). Iterations past the last set reuse it
// (the optimal polynomials have converged numerically to (15x-10x^3+3x^5)/8).
inline constexpr Coeffs kPolarExpress[] = {
    {8.28721201814563, -23.595886519098837, 17.300387312530933},
    {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
    {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
    {3.3184196573706015, -2.488488024314874, 0.51004894012372},
    {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
    {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
    {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
    {1.875, -1.25, 0.375},
};
inline constexpr int kPolarExpressCount =
    static_cast<int>(sizeof(kPolarExpress) / sizeof(kPolarExpress[0]));

// The paper's safety factor (Section 4.4 / Algorithm 1), for stability in low
// precision: every set but the last becomes p(x/1.01), i.e. (a/1.01,
// b/1.01^3, c/1.01^5), and the input is normalized by 1.01*||G||_F + 1e-7
// instead of ||G||_F + 1e-7. We keep both so that results match the
// reference algorithm.
inline constexpr double kPolarExpressSafety = 1.01;

// The additive epsilon of the normalization X = G / (s * ||G||_F + eps).
inline constexpr double kNormEpsilon = 1e-7;

// Number of coefficient sets; iterations at or past it reuse the last one.
inline int coefficientCount(bool polarExpress) {
  return polarExpress ? kPolarExpressCount : 1;
}

// Safety factor s of the normalization: 1 (Original) or 1.01 (PolarExpress).
inline float normScale(bool polarExpress) {
  return polarExpress ? static_cast<float>(kPolarExpressSafety) : 1.0f;
}

// The (a, b, c) of iteration `iteration` (0-based), safety factor applied,
// rounded to float once.
inline void coefficients(bool polarExpress, int iteration, float &a, float &b, float &c) {
  if (!polarExpress) {
    a = static_cast<float>(kOriginal.a);
    b = static_cast<float>(kOriginal.b);
    c = static_cast<float>(kOriginal.c);
    return;
  }
  const int last = kPolarExpressCount - 1;
  const int i = iteration < 0 ? 0 : (iteration > last ? last : iteration);
  const Coeffs &k = kPolarExpress[i];
  const double s = i == last ? 1.0 : kPolarExpressSafety;
  a = static_cast<float>(k.a / s);
  b = static_cast<float>(k.b / (s * s * s));
  c = static_cast<float>(k.c / (s * s * s * s * s));
}

} // namespace dmuon::kernels::ns

#endif
