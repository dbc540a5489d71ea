// The update rules of matrix params (plan.fbs `MatrixOptimizer`): their
// names as manifests and flags spell them, and the per-row state NorMuon
// keeps. Shared by dmuonc, the verifier, the runtime and the printers.
#ifndef DMUON_COMMON_MATRIXOPTIMIZERS_H
#define DMUON_COMMON_MATRIXOPTIMIZERS_H

#include "dmuon/plan_generated.h"

#include <cstdint>
#include <optional>
#include <string_view>

namespace dmuon::common {

inline std::optional<plan::MatrixOptimizer> parseMatrixOptimizer(std::string_view name) {
  for (plan::MatrixOptimizer m : {plan::MatrixOptimizer::muon, plan::MatrixOptimizer::normuon})
    if (name == plan::EnumNameMatrixOptimizer(m))
      return m;
  return std::nullopt;
}

inline constexpr const char *kMatrixOptimizerNames = "\"muon\", \"normuon\"";

// The fp32 state elements a matrix param's rule keeps on its owner beside
// the master, for a local matrix view of batch x rows x cols: the momentum,
// and NorMuon's second moment per row.
inline int64_t matrixStateElements(plan::MatrixOptimizer m, int64_t batch, int64_t rows,
                                   int64_t cols) {
  const int64_t momentum = batch * rows * cols;
  return m == plan::MatrixOptimizer::normuon ? momentum + batch * rows : momentum;
}

} // namespace dmuon::common

#endif
