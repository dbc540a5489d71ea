// The replicated route: every data-parallel rank holds the param and its
// AdamW moments; the gradients of all such params share one buffer, averaged
// with one all-reduce at the step (and one per run of params summed along
// the same data-carrying dims), and every rank applies the same update.
#ifndef DMUON_RUNTIME_ROUTES_REPLICATEDROUTE_H
#define DMUON_RUNTIME_ROUTES_REPLICATEDROUTE_H

#include "routes/Route.h"

#include <vector>

namespace dmuon::rt {

class ReplicatedRoute final : public Route {
public:
  Status init(const Context &ctx, std::vector<ParamRt> &params);
  // Plan param `index`'s slot in the gradient buffer.
  float *gradSlot(int index) const { return grad_.floats() + offsets_[index]; }
  // Averages the gradients over the data-parallel ranks (when the runtime
  // manages these params; otherwise the host does).
  Status finishGradients() override;
  // Null unless the runtime manages these params.
  GradView averagedGrad(int index) override;
  // Its params are all AdamW: clipped under every policy that clips.
  Status scaleGrads(float factor, bool /*muonToo*/) override {
    return ctx_->device.scaleCopy(grad_.floats(), grad_.floats(), factor,
                                  static_cast<int64_t>(elements_));
  }
  Status zeroGrads() override { return ctx_->device.zero(grad_.bytes(), gradBytes()); }
  // Applies the update to the averaged gradients (when managed), then zeroes
  // them for the next step.
  Status step(int64_t adamwStep) override;
  uint64_t gradBytes() const { return elements_ * sizeof(float); }
  // Per step, what finishGradients() sends (and receives) when it manages
  // these params.
  uint64_t allReduceBytesPerStep() const;

private:
  const Context *ctx_ = nullptr;
  std::vector<ParamRt> *params_ = nullptr;
  std::vector<int> members_; // grouped by the dims they are summed along
  std::vector<size_t> offsets_; // per plan param: its slot in grad_
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
