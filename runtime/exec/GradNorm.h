// The global norm of a step's averaged gradient and clipping by it. Each
// rank sums the squares of the gradient elements it speaks for (the global
// owner for the owner route, slot (0, 0) for replicated params; coordinate 0
// of the model-parallel dims a param is not sharded on), in double, and one
// all-reduce of two scalars over the world gives every rank the same sums:
// the same norm, the same clip factor and the same verdict on non-finite
// values (a NaN or Inf anywhere makes the sum non-finite).
#ifndef DMUON_RUNTIME_EXEC_GRADNORM_H
#define DMUON_RUNTIME_EXEC_GRADNORM_H

#include "core/Context.h"
#include "core/Params.h"
#include "routes/Route.h"

#include <cmath>
#include <vector>

namespace dmuon::rt {

struct GradNorms {
  double muonSquares = 0, adamwSquares = 0;
  double muon() const { return std::sqrt(muonSquares); }
  double adamw() const { return std::sqrt(adamwSquares); }
  double total() const { return std::sqrt(muonSquares + adamwSquares); }
  bool finite() const { return std::isfinite(muonSquares + adamwSquares); }
};

// The factor clipping applies: min(1, max / (norm + 1e-6)) as
// torch.nn.utils.clip_grad_norm_, of the total norm or the AdamW params'.
double clipFactor(const Config &config, const GradNorms &norms);

// Whether the gradients, once clipped by `factor`, have a squared norm past
// fp32's range: every rule squares them into fp32 state (Adam's second
// moment, SOAP's and Shampoo's statistics), where they would become Inf and
// stay Inf (a decayed Inf is Inf), freezing the param for good. Such a step
// is skipped as a non-finite one is.
bool squaresOverflowState(const Config &config, const GradNorms &norms, double factor);

class GradNorm {
public:
  Status init(const Context &ctx);
  // `routes[r]` is the route of the params whose plan::Route is r (null:
  // the host's). Summed in plan order, the same on every mesh and route.
  Status measure(const std::vector<ParamRt> &params, const std::vector<Route *> &routes,
                 GradNorms &out);
  // Scales the gradients the policy clips by `factor`.
  Status clip(const std::vector<Route *> &routes, double factor);

private:
  const Context *ctx_ = nullptr;
  DeviceArray sums_; // two doubles: Muon, AdamW
};

} // namespace dmuon::rt

#endif
