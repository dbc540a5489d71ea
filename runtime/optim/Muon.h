// Muon: momentum, then Newton-Schulz orthogonalization of the update, on
// the whole matrix. A matrix this rank holds whole (or as its local matrix)
// runs here; one sharded on a matrix dim over a model-parallel group is
// gathered for NS first (optim/GatheredMuon).
#ifndef DMUON_RUNTIME_OPTIM_MUON_H
#define DMUON_RUNTIME_OPTIM_MUON_H

#include "optim/GatheredMuon.h"
#include "optim/Optimizer.h"

namespace dmuon::rt {

class Muon final : public ParamOptimizer {
public:
  std::span<const StateField> fields() const override;
  // Sizes the NS scratch once for the largest matrix this rank
  // orthogonalizes.
  Status reserve(const Context &ctx, const std::vector<ParamRt> &params) override;
  Status step(const Context &ctx, ParamRt &p, const float *grad, int64_t n,
              int64_t adamwStep) override;
  // NS flops this rank ran so far.
  double nsFlops() const { return nsFlops_; }

private:
  GatherScratch scratch_;
  double nsFlops_ = 0;
};

} // namespace dmuon::rt

#endif
