// The owner-only optimizer step: Muon on every Muon param this rank owns
// (whole on this rank, or gathered over a model-parallel group), AdamW on
// every owner-routed AdamW param it owns; then each reduced gradient is
// dropped (I3).
#ifndef DMUON_RUNTIME_OPTIM_OWNERSTEP_H
#define DMUON_RUNTIME_OPTIM_OWNERSTEP_H

#include "optim/GatheredMuon.h"

#include <vector>

namespace dmuon::rt {

class OwnerStep {
public:
  // Sizes the NS scratch once for the largest matrix this rank
  // orthogonalizes, so steps do not allocate.
  Status init(const Context &ctx, std::vector<ParamRt> &params);
  Status step(int64_t adamwStep);
  // NS flops this rank ran so far.
  double nsFlops() const { return nsFlops_; }

private:
  const Context *ctx_ = nullptr;
  std::vector<ParamRt> *params_ = nullptr;
  GatherScratch scratch_;
  double nsFlops_ = 0;
};

} // namespace dmuon::rt

#endif
