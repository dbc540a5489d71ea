#include "exec/GradNorm.h"

#include <algorithm>
#include <limits>

namespace dmuon::rt {

double clipFactor(const Config &config, const GradNorms &norms) {
  if (config.maxGradNorm <= 0 || config.clipPolicy == DMUON_CLIP_NONE)
    return 1.0;
  const double norm = config.clipPolicy == DMUON_CLIP_ALL ? norms.total() : norms.adamw();
  return std::min(1.0, config.maxGradNorm / (norm + 1e-6));
}

bool squaresOverflowState(const Config &config, const GradNorms &norms, double factor) {
  const double f2 = factor * factor;
  double squares = norms.muonSquares + norms.adamwSquares;
  if (config.clipPolicy == DMUON_CLIP_ALL)
    squares *= f2;
  else if (config.clipPolicy == DMUON_CLIP_ADAMW_ONLY)
    squares = norms.muonSquares + norms.adamwSquares * f2;
  return squares >= static_cast<double>(std::numeric_limits<float>::max());
}

Status GradNorm::init(const Context &ctx) {
  ctx_ = &ctx;
  return sums_.allocate(ctx.device, 2 * sizeof(double));
}

Status GradNorm::measure(const std::vector<ParamRt> &params, const std::vector<Route *> &routes,
                         GradNorms &out) {
  Device &dev = ctx_->device;
  auto *sums = reinterpret_cast<double *>(sums_.bytes());
  DMUON_RETURN_IF_ERROR(dev.zero(sums, 2 * sizeof(double)));
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamRt &p = params[i];
    Route *route = routes[static_cast<size_t>(p.route)];
    if (!p.countsInNorm || !route)
      continue;
    const GradView grad = route->averagedGrad(static_cast<int>(i));
    if (grad.data)
      DMUON_RETURN_IF_ERROR(dev.addSumOfSquares(grad.data, grad.count, sums + (p.muon ? 0 : 1)));
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

Status GradNorm::clip(const std::vector<Route *> &routes, double factor) {
  if (factor >= 1.0)
    return Status::ok();
  // AdamW gradients are clipped under every policy that clips; Muon's only
  // under `all`.
  const bool muonToo = ctx_->config.clipPolicy == DMUON_CLIP_ALL;
  for (Route *route : routes)
    if (route)
      DMUON_RETURN_IF_ERROR(route->scaleGrads(static_cast<float>(factor), muonToo));
  return Status::ok();
}

} // namespace dmuon::rt
