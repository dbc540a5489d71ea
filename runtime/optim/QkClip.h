// QK-Clip (MuonClip, Kimi K2) on the plan's query/key pairs. The host
// reports, before each step, the largest attention logit each head of each
// pair produced on this rank (dmuon_runtime_set_qk_max_logits); the step
// takes the maximum over every rank with one all-reduce and, after the
// owner step and before the replicate broadcast (so the broadcast carries
// the rescaled masters down each shard column, I2/I4), the owners rescale
// the rows of every head whose maximum exceeds tau:
//   gamma = tau / max;  W_q rows *= sqrt(gamma), W_k rows *= sqrt(gamma)
// With grouped-query attention (fewer key heads than query heads) a key
// head is shared by several query heads, so only the query head's rows are
// rescaled, by the whole gamma (as Kimi K2 does for its shared rotary key).
// Heads at or under tau are not touched.
#ifndef DMUON_RUNTIME_OPTIM_QKCLIP_H
#define DMUON_RUNTIME_OPTIM_QKCLIP_H

#include "core/Context.h"
#include "core/Params.h"

#include <vector>

namespace dmuon::rt {

class QkClip {
public:
  Status init(const Context &ctx, std::vector<ParamRt> &params);
  // Raises this step's maxima of `pair` to `values` where they are larger
  // (calls add up over micro-batches); `count` must be its query heads.
  Status setMaxLogits(int pair, const float *values, int64_t count);
  // The all-reduce and the owners' rescaling; forgets the step's maxima.
  // Collective whenever the plan has pairs.
  Status apply();
  // Forgets the step's maxima (a skipped step clips nothing).
  void discard();
  int64_t clippedLastStep() const { return clippedLast_; }
  int64_t clippedTotal() const { return clippedTotal_; }

private:
  struct Pair {
    int query = -1, key = -1;
    int heads = 0, keyHeads = 0, headDim = 0;
    size_t first = 0; // of its heads in maxima_
  };
  // Rows [head*headDim, (head+1)*headDim) of an owned param times `scale`.
  Status scaleHead(int param, int headDim, int head, double scale);

  const Context *ctx_ = nullptr;
  std::vector<ParamRt> *params_ = nullptr;
  std::vector<Pair> pairs_;
  std::vector<float> maxima_; // this rank's, -inf where nothing was reported
  DeviceArray exchange_;      // maxima_ on the device, for the all-reduce
  double tau_ = 0;
  int64_t clippedLast_ = 0, clippedTotal_ = 0;
};

} // namespace dmuon::rt

#endif
