#include "optim/QkClip.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dmuon::rt {

Status QkClip::init(const Context &ctx, std::vector<ParamRt> &params) {
  ctx_ = &ctx;
  params_ = &params;
  tau_ = ctx.plan.root().options()->qk_clip_tau();
  const auto *pairs = ctx.plan.root().qk_clip();
  size_t heads = 0;
  for (flatbuffers::uoffset_t i = 0; pairs && i < pairs->size(); ++i) {
    const plan::QkClipPair &q = *pairs->Get(i);
    pairs_.push_back({q.query(), q.key(), q.heads(), q.key_heads(), q.head_dim(), heads});
    heads += static_cast<size_t>(q.heads());
  }
  maxima_.assign(heads, -std::numeric_limits<float>::infinity());
  return heads ? exchange_.allocate(ctx.device, heads * sizeof(float)) : Status::ok();
}

Status QkClip::setMaxLogits(int pair, const float *values, int64_t count) {
  const int n = static_cast<int>(pairs_.size());
  if (pair < 0 || pair >= n)
    return invalidArgument("set_qk_max_logits: pair " + std::to_string(pair) +
                           " is out of range (the plan has " + std::to_string(n) +
                           " qk_clip pairs)");
  const Pair &p = pairs_[static_cast<size_t>(pair)];
  const std::string what = "set_qk_max_logits(pair " + std::to_string(pair) + ", query '" +
                           (*params_)[p.query].name + "')";
  if (!values)
    return invalidArgument(what + ": max_logits is null");
  if (count != p.heads)
    return invalidArgument(what + ": got " + std::to_string(count) + " values, but the pair has " +
                           std::to_string(p.heads) + " heads");
  for (int64_t h = 0; h < count; ++h)
    if (!std::isfinite(values[h]))
      return invalidArgument(what + ": max_logits[" + std::to_string(h) + "] is " +
                             formatNumber(values[h]) + ", not a finite number");
  for (int64_t h = 0; h < count; ++h) {
    float &m = maxima_[p.first + static_cast<size_t>(h)];
    m = std::max(m, values[h]);
  }
  return Status::ok();
}

void QkClip::discard() {
  std::fill(maxima_.begin(), maxima_.end(), -std::numeric_limits<float>::infinity());
  clippedLast_ = 0;
}

Status QkClip::apply() {
  if (pairs_.empty())
    return Status::ok();
  Device &dev = ctx_->device;
  const size_t bytes = maxima_.size() * sizeof(float);
  DMUON_RETURN_IF_ERROR(dev.upload(exchange_.bytes(), maxima_.data(), bytes));
  RequestId id;
  DMUON_RETURN_IF_ERROR(
      ctx_->backend.allReduceMax(Communicator::World, exchange_.floats(), maxima_.size(), id));
  DMUON_RETURN_IF_ERROR(ctx_->backend.wait(id));
  std::vector<float> global(maxima_.size());
  DMUON_RETURN_IF_ERROR(dev.download(global.data(), exchange_.bytes(), bytes));
  discard();
  for (const Pair &p : pairs_) {
    const bool sharedKeys = p.keyHeads < p.heads;
    for (int h = 0; h < p.heads; ++h) {
      const float m = global[p.first + static_cast<size_t>(h)];
      if (!(m > tau_))
        continue; // untouched
      ++clippedLast_;
      const double gamma = tau_ / m;
      DMUON_RETURN_IF_ERROR(
          scaleHead(p.query, p.headDim, h, sharedKeys ? gamma : std::sqrt(gamma)));
      if (!sharedKeys)
        DMUON_RETURN_IF_ERROR(scaleHead(p.key, p.headDim, h, std::sqrt(gamma)));
    }
  }
  clippedTotal_ += clippedLast_;
  return Status::ok();
}

Status QkClip::scaleHead(int param, int headDim, int head, double scale) {
  ParamRt &p = (*params_)[param];
  if (!p.owner.isOwner) // each owner rescales its own param (on every model-parallel shard)
    return Status::ok();
  const int64_t n = int64_t(headDim) * p.localCols;
  float *rows = p.master.floats() + int64_t(head) * n;
  return ctx_->device.scaleCopy(rows, rows, static_cast<float>(scale), n);
}

} // namespace dmuon::rt
