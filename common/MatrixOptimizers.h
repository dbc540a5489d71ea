// The update rules of matrix params (plan.fbs `MatrixOptimizer`): their
// names as manifests and flags spell them, and the state each keeps. Shared by dmuonc, the
// verifier, the runtime and the printers.
#ifndef DMUON_COMMON_MATRIXOPTIMIZERS_H
#define DMUON_COMMON_MATRIXOPTIMIZERS_H

#include "dmuon/plan_generated.h"

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
