// The update rules of matrix params (plan.fbs `MatrixOptimizer`): their
// names as manifests and flags spell them, and the state each keeps. Shared by dmuonc, the
// verifier, the runtime and the printers.
#ifndef DMUON_COMMON_MATRIXOPTIMIZERS_H
#define DMUON_COMMON_MATRIXOPTIMIZERS_H

#include "dmuon/plan_generated.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dmuon::common {

inline std::optional<plan::MatrixOptimizer> parseMatrixOptimizer(std::string_view name) {
  for (plan::MatrixOptimizer m : {plan::MatrixOptimizer::muon, plan::MatrixOptimizer::normuon,
                                  plan::MatrixOptimizer::soap, plan::MatrixOptimizer::shampoo})
    if (name == plan::EnumNameMatrixOptimizer(m))
      return m;
  return std::nullopt;
}

inline constexpr const char *kMatrixOptimizerNames = "\"muon\", \"normuon\", \"soap\", \"shampoo\"";

// Whether a rule keeps Shampoo's per-side statistics (SOAP and Shampoo).
inline bool preconditions(plan::MatrixOptimizer m) {
  return m == plan::MatrixOptimizer::soap || m == plan::MatrixOptimizer::shampoo;
}

// The longest side SOAP and Shampoo precondition (the plan's
// soap_max_precond_dim, shampoo_max_preconditioner_dim); a longer one is
// left as it is.
struct PreconditionCaps {
  int64_t soap = 10000, shampoo = 8192;
  int64_t of(plan::MatrixOptimizer m) const {
    return m == plan::MatrixOptimizer::soap ? soap : shampoo;
  }
};

// Whether a side of `dim` gets statistics under `cap`.
inline bool preconditionsSide(int64_t dim, int64_t cap) { return dim <= cap; }

// SOAP's and Shampoo's flops per step on a batch x rows x cols matrix, each
// side's refresh amortized over `frequency` steps; what the partition
// balances for them (Muon's and NorMuon's is their NS). Through a kept side
// of d, a rotation costs 2 rows cols d; SOAP rotates the gradient and its
// first moment in and its direction out and updates the statistics (four
// per side), and refreshes by one product and a QR (2 d^3 + 8/3 d^3);
// Shampoo updates the statistics and applies the root (two per side), and
// refreshes by an eigendecomposition and a product (about 9 d^3 + 2 d^3).
// The flops of one refresh of every kept side (the step that runs it pays
// them; the others do not).
inline double refreshFlops(plan::MatrixOptimizer m, int64_t batch, int64_t rows, int64_t cols,
                           int64_t cap) {
  const double perCube = m == plan::MatrixOptimizer::soap ? 14.0 / 3 : 11;
  double flops = 0;
  for (int64_t d : {rows, cols})
    if (preconditionsSide(d, cap))
      flops += perCube * static_cast<double>(d) * d * d;
  return static_cast<double>(batch) * flops;
}
// The flops of a step without a refresh.
inline double steadyFlops(plan::MatrixOptimizer m, int64_t batch, int64_t rows, int64_t cols,
                          int64_t cap) {
  const double perSide = m == plan::MatrixOptimizer::soap ? 4 : 2;
  double flops = 10.0 * rows * cols; // the element-wise moments and update
  for (int64_t d : {rows, cols})
    if (preconditionsSide(d, cap))
      flops += perSide * 2.0 * rows * cols * d;
  return static_cast<double>(batch) * flops;
}
inline double preconditionerFlops(plan::MatrixOptimizer m, int64_t batch, int64_t rows,
                                  int64_t cols, int64_t cap, int64_t frequency) {
  return steadyFlops(m, batch, rows, cols, cap) +
         refreshFlops(m, batch, rows, cols, cap) /
             static_cast<double>(std::max<int64_t>(1, frequency));
}

// The fp32 state elements a matrix param's rule keeps on its owner beside
// the master, for a local matrix view of batch x rows x cols: the momentum;
// NorMuon's second moment per row; SOAP's and Shampoo's two moments
// (SOAP: Adam's m and v; Shampoo: its filtered gradient and the Adam
// graft's v) and, per side it preconditions, the side's statistics and its
// basis (SOAP: eigenvectors; Shampoo: the inverse root).
inline int64_t matrixStateElements(plan::MatrixOptimizer m, int64_t batch, int64_t rows,
                                   int64_t cols, const PreconditionCaps &caps = {}) {
  const int64_t momentum = batch * rows * cols;
  if (m == plan::MatrixOptimizer::normuon)
    return momentum + batch * rows;
  if (!preconditions(m))
    return momentum;
  int64_t sides = 0;
  for (int64_t d : {rows, cols})
    if (preconditionsSide(d, caps.of(m)))
      sides += 2 * batch * d * d;
  return 2 * momentum + sides;
}

} // namespace dmuon::common

#endif
