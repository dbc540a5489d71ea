// The replicated route: every data-parallel rank holds the param and its
// AdamW moments; the gradients of all such params share one buffer, averaged
// with one all-reduce at the step, and every rank applies the same update.
#ifndef DMUON_RUNTIME_ROUTES_REPLICATEDROUTE_H
#define DMUON_RUNTIME_ROUTES_REPLICATEDROUTE_H

#include "core/Context.h"
#include "core/Params.h"

#include <vector>

namespace dmuon::rt {

class ReplicatedRoute {
public:
  Status init(const Context &ctx, std::vector<ParamRt> &params);
  float *gradSlot(const ParamRt &p) const { return grad_.floats() + p.gradOffset; }
  // Averages the gradients and applies AdamW (when the runtime manages these
  // params), then zeroes the gradients for the next step.
  Status step();
  uint64_t gradBytes() const { return elements_ * sizeof(float); }
  int64_t adamwStep() const { return adamwStep_; }
  void setAdamwStep(int64_t s) { adamwStep_ = s; }

private:
  const Context *ctx_ = nullptr;
  std::vector<ParamRt> *params_ = nullptr;
  std::vector<int> members_;
  DeviceArray grad_;
  size_t elements_ = 0;
  int64_t adamwStep_ = 0;
};

} // namespace dmuon::rt

#endif
