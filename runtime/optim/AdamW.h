// AdamW (decoupled weight decay, bias-corrected moments) on the values a
// rank keeps: every route's rule for the params Muon leaves out.
#ifndef DMUON_RUNTIME_OPTIM_ADAMW_H
#define DMUON_RUNTIME_OPTIM_ADAMW_H

#include "optim/Optimizer.h"

namespace dmuon::rt {

class AdamW final : public ParamOptimizer {
public:
  std::span<const StateField> fields() const override;
  Status step(const Context &ctx, ParamRt &p, const float *grad, int64_t n,
              int64_t adamwStep) override;
};

} // namespace dmuon::rt

#endif
