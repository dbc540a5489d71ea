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
  // Averages the gradients over the data-parallel ranks (when the runtime
  // manages these params; otherwise the host does).
  Status reduce();
  // Applies AdamW to the averaged gradients (when managed), then zeroes them
  // for the next step.
  Status step(int64_t adamwStep);
  // Multiplies every gradient by `factor` (clipping).
  Status scaleGrads(float factor) {
    return ctx_->device.scaleCopy(grad_.floats(), grad_.floats(), factor,
                                  static_cast<int64_t>(elements_));
  }
  // Drops this step's gradients (a skipped step).
  Status zeroGrads() { return ctx_->device.zero(grad_.bytes(), gradBytes()); }
  const std::vector<int> &members() const { return members_; }
  uint64_t gradBytes() const { return elements_ * sizeof(float); }
  // Per step, what reduce() sends (and receives) when it manages these params.
  uint64_t allReduceBytesPerStep() const;

private:
  const Context *ctx_ = nullptr;
  std::vector<ParamRt> *params_ = nullptr;
  std::vector<int> members_; // grouped by the dims they are summed along
  // Each run of members summed along the same data-carrying dims.
  struct AlongRun {
    Communicator group;
    size_t offset, elements;
  };
  std::vector<AlongRun> alongRuns_;
  DeviceArray grad_;
  size_t elements_ = 0;
};

} // namespace dmuon::rt

#endif
