// The Newton-Schulz forms' flop counts and the per-shape rule that picks one
// (NsForm::Auto), shared by the CPU kernels, the CUDA kernels and the
// benchmarks. Plain C++17, header-only, no dependencies: nvcc compiles it in
// host code.
//
// For an m x n matrix, s = min(m, n) and l = max(m, n); K iterations. A SYRK
// computes one triangle of a symmetric product, half a GEMM's flops.
//
//   ThreeGemm  K (4 s^2 l + 2 s^3)        X X^T, A A, B X as GEMMs
//   Symmetric  K (3 s^2 l + s^3)          SYRK for X X^T and A A
//   Gram       3 s^2 l + (6K - 5) s^3     R = X0 X0^T (SYRK) and X = P X0 at
//              (+ 3 s^2 l per restart)    the ends; per iteration A^2 and Q^2
//                                         (SYRK), P <- Q P and A <- A Q^2
//                                         (GEMM), less the work the first
//                                         (P = Q) and last (no A update) skip
//
// Gram does fewer flops than Symmetric once l/s > 5/3 (for any K >= 2). Its
// s x s iteration accumulates a polynomial P in the Gram matrix whose
// rounding error grows with K; kGramRestartEvery re-forms the Gram matrix
// from the s x l iterate to reset it (measured: docs/benchmarks.md).
#ifndef DMUON_KERNELS_NSFORMS_H
#define DMUON_KERNELS_NSFORMS_H

#include "kernels/Hyper.h"

#include <cstdint>

namespace dmuon::kernels::ns {

// Auto picks Gram when the long side is at least this many times the short
// side. Below it, Gram's s^3 iteration costs about as much as it saves
// (break-even 5/3 in flops; SYRK and the small products run a little slower
// than the big GEMMs, so the measured crossover is higher).
inline constexpr double kGramMinAspect = 2.0;

// Gram re-forms its Gram matrix from the s x l iterate after this many
// iterations (0: never). At 5 iterations its P reaches cond ~ a^5 ~ 500 on
// near-null directions; re-forming after 3 keeps the fp32 result within 1e-5
// of ThreeGemm (see test/unit/NsFormsTest.cpp).
inline constexpr int kGramRestartEvery = 3;

// Below this short side every form runs in well under a millisecond and the
// extra calls of the structured forms outweigh their savings: ThreeGemm.
inline constexpr int64_t kStructuredMinSide = 32;

inline const char *formName(NsForm form) {
  switch (form) {
  case NsForm::Auto:
    return "auto";
  case NsForm::ThreeGemm:
    return "three-gemm";
  case NsForm::Symmetric:
    return "symmetric";
  case NsForm::Gram:
    return "gram";
  }
  return "?";
}

// The form Auto runs for a rows x cols matrix. It does not depend on the
// step count: at one step Gram and Symmetric do the same work.
inline NsForm chooseForm(int64_t rows, int64_t cols) {
  const int64_t s = rows < cols ? rows : cols;
  const int64_t l = rows < cols ? cols : rows;
  if (s < kStructuredMinSide)
    return NsForm::ThreeGemm;
  if (static_cast<double>(l) >= kGramMinAspect * static_cast<double>(s))
    return NsForm::Gram;
  return NsForm::Symmetric;
}

// `form` with Auto resolved.
inline NsForm resolveForm(NsForm form, int64_t rows, int64_t cols) {
  return form == NsForm::Auto ? chooseForm(rows, cols) : form;
}

// Number of Gram re-formations in `steps` iterations: before iterations
// kGramRestartEvery, 2 kGramRestartEvery, ... that are not the first.
inline int gramRestarts(int steps) {
  if (kGramRestartEvery <= 0 || steps <= 1)
    return 0;
  return (steps - 1) / kGramRestartEvery;
}

// Flops of one NS of a rows x cols matrix in `form` (Auto resolved), as the
// kernels run it; elementwise work is not counted.
inline double flops(NsForm form, int64_t rows, int64_t cols, int steps) {
  const double s = static_cast<double>(rows < cols ? rows : cols);
  const double l = static_cast<double>(rows < cols ? cols : rows);
  const double k = steps;
  if (steps <= 0)
    return 0.0;
  switch (resolveForm(form, rows, cols)) {
  case NsForm::Symmetric:
    return k * (3.0 * s * s * l + s * s * s);
  case NsForm::Gram: {
    // Each restart splits the run into independent Gram segments.
    const int restarts = gramRestarts(steps);
    double total = 0.0;
    int left = steps;
    for (int seg = 0; seg <= restarts; ++seg) {
      const int len = seg < restarts ? kGramRestartEvery : left;
      left -= len;
      const double segmentS3 = len == 1 ? 1.0 : 6.0 * len - 5.0;
      total += 3.0 * s * s * l + segmentS3 * s * s * s;
    }
    return total;
  }
  case NsForm::ThreeGemm:
  case NsForm::Auto:
    break;
  }
  return k * (4.0 * s * s * l + 2.0 * s * s * s);
}

} // namespace dmuon::kernels::ns

#endif
