#include "optim/GradNorm.h"

#include <algorithm>

namespace dmuon::rt {

double clipFactor(const Config &config, const GradNorms &norms) {
  if (config.maxGradNorm <= 0 || config.clipPolicy == DMUON_CLIP_NONE)
    return 1.0;
  const double norm = config.clipPolicy == DMUON_CLIP_ALL ? norms.total() : norms.adamw();
  return std::min(1.0, config.maxGradNorm / (norm + 1e-6));
}

Status GradNorm::init(const Context &ctx) {
  ctx_ = &ctx;
  return sums_.allocate(ctx.device, 2 * sizeof(double));
}

Status GradNorm::measure(const std::vector<ParamRt> &params, const ReplicatedRoute &replicated,
                         GradNorms &out) {
  Device &dev = ctx_->device;
  auto *sums = reinterpret_cast<double *>(sums_.bytes());
  DMUON_RETURN_IF_ERROR(dev.zero(sums, 2 * sizeof(double)));
  for (const ParamRt &p : params) {
    if (!p.countsInNorm)
      continue;
    const float *grad = nullptr;
    int64_t n = p.numel;
    if (p.route == Route::Owner) {
      grad = p.reducedGrad.floats();
    } else if (p.route == Route::Sharded) {
      grad = p.gradShard.floats(); // its padding is zero
      n = p.shardElements;
    } else if (p.route == Route::Replicated && ctx_->config.manageAdamW) {
      grad = replicated.gradSlot(p);
    }
    if (grad)
      DMUON_RETURN_IF_ERROR(dev.addSumOfSquares(grad, n, sums + (p.muon ? 0 : 1)));
  }
  RequestId id;
  DMUON_RETURN_IF_ERROR(ctx_->backend.allReduceSum(Communicator::World, sums, 2, id));
  DMUON_RETURN_IF_ERROR(ctx_->backend.wait(id));
  double host[2];
  DMUON_RETURN_IF_ERROR(dev.download(host, sums, sizeof host));
  out.muonSquares = host[0];
  out.adamwSquares = host[1];
  return Status::ok();
}

Status GradNorm::clip(std::vector<ParamRt> &params, ShardedRoute &sharded,
                      ReplicatedRoute &replicated, double factor) {
  if (factor >= 1.0)
    return Status::ok();
  const auto f = static_cast<float>(factor);
  // AdamW gradients are clipped under every policy that clips; Muon's only
  // under `all`.
  const bool muonToo = ctx_->config.clipPolicy == DMUON_CLIP_ALL;
  for (ParamRt &p : params)
    if ((muonToo || !p.muon) && p.reducedGrad.live())
      DMUON_RETURN_IF_ERROR(
          ctx_->device.scaleCopy(p.reducedGrad.floats(), p.reducedGrad.floats(), f, p.numel));
  DMUON_RETURN_IF_ERROR(sharded.scaleGrads(f));
  return replicated.scaleGrads(f);
}

} // namespace dmuon::rt
