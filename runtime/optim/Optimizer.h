// A param's update rule, run by each rank that steps the param (the global
// owner on the owner route, every shard on the sharded route, every rank on
// the replicated route): the fp32 state it keeps beside the values, and the
// step. The routes move gradients and values; the rule does the math: AdamW,
// Muon and NorMuon (optim/Muon.h), SOAP and Shampoo (optim/Preconditioned.h).
#ifndef DMUON_RUNTIME_OPTIM_OPTIMIZER_H
#define DMUON_RUNTIME_OPTIM_OPTIMIZER_H

#include "checkpoint/CheckpointFile.h"
#include "core/Context.h"
#include "core/Params.h"

#include <algorithm>
#include <span>
#include <vector>

namespace dmuon::rt {

// One fp32 array of a rule's per-param state: its checkpoint entry, the
// memory category the plan's figures count it in, and its shape: as many
// elements as the values this rank keeps (ParamRt::heldElements), one per
// row of the local matrix view, or a square matrix per matrix of the view on
// its rows' side (Left: leftDim^2) or its columns' (Right: rightDim^2).
enum class StateShape { Values, Rows, Left, Right };
struct StateField {
  ckpt::Kind kind;
  MemoryAccount MemoryAccounts::*account;
  StateShape shape = StateShape::Values;
};

// The elements of `field` that `p` keeps where it steps.
inline int64_t stateElements(const ParamRt &p, const StateField &field) {
  switch (field.shape) {
  case StateShape::Rows:
    return p.numel / std::max<int64_t>(1, p.localCols);
  case StateShape::Left:
    return p.localBatch * p.leftDim * p.leftDim;
  case StateShape::Right:
    return p.localBatch * p.rightDim * p.rightDim;
  case StateShape::Values:
    break;
  }
  return p.heldElements();
}
// The whole checkpoint entry of a square state (Left, Right): batch x d x d.
inline std::vector<int64_t> squareStateShape(const ParamRt &p, const StateField &field) {
  const int64_t d = field.shape == StateShape::Left ? p.leftDim : p.rightDim;
  return {p.localBatch, d, d};
}

class ParamOptimizer {
public:
  virtual ~ParamOptimizer() = default;
  // The arrays of ParamRt::state, in order.
  virtual std::span<const StateField> fields() const = 0;
  // Sizes what its steps need ahead of the first one, so steps do not
  // allocate; `params` are every param of the plan.
  virtual Status reserve(const Context & /*ctx*/, const std::vector<ParamRt> & /*params*/) {
    return Status::ok();
  }
  // One update of the `n` values this rank keeps of `p` from its averaged
  // gradient `grad`; `adamwStep` is AdamW's bias-correction step.
  virtual Status step(const Context &ctx, ParamRt &p, const float *grad, int64_t n,
                      int64_t adamwStep) = 0;
};

// The state array of `kind` that `p` keeps here, or null.
inline DeviceArray *stateOf(ParamRt &p, ckpt::Kind kind) {
  if (!p.optimizer)
    return nullptr;
  const std::span<const StateField> fields = p.optimizer->fields();
  for (size_t k = 0; k < fields.size() && k < p.state.size(); ++k)
    if (fields[k].kind == kind)
      return &p.state[k];
  return nullptr;
}
inline const DeviceArray *stateOf(const ParamRt &p, ckpt::Kind kind) {
  return stateOf(const_cast<ParamRt &>(p), kind);
}

} // namespace dmuon::rt

#endif
