// What a plan carries, by the format minor that added it (docs/plan-format.md,
// "Versions"): a reader of an older minor's plan asks for the feature by
// name, not for the number.
#ifndef DMUON_PLAN_FEATURES_H
#define DMUON_PLAN_FEATURES_H

#include "dmuon/plan_generated.h"

#include <cstdint>

namespace dmuon {

enum class PlanFeature : uint32_t {
  // 1.3: every param has a route; Muon params travel the owner route.
  Routes = 3,
  // 1.4: mesh dims may carry data (ep, cp, ...); params list theirs, and
  // owners pick coordinates on them.
  DataCarryingDims = 4,
  // 1.6: slot loads and rank rows as runs of equal values.
  LoadRuns = 6,
  // 1.7: matrix params name their update rule (Param.matrix_optimizer).
  MatrixOptimizers = 7,
  // 1.8: SOAP and Shampoo matrices, and their settings in OptimizerDefaults.
  Preconditioners = 8,
  // 1.9: matrices orthogonalized as blocks (Param.block_sizes), and
  // pipeline stages (MeshDim.is_stage, Param/HookGroup.pipeline_stage).
  MatrixBlocks = 9,
  PipelineStages = 9,
};

inline bool planHas(const plan::Plan &p, PlanFeature f) {
  return p.format_minor() >= static_cast<uint32_t>(f);
}

} // namespace dmuon

#endif
