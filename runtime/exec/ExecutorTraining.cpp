// What a training loop sets and reads between hooks: micro-batch
// declarations, hyper-parameters for a schedule (agreed on by every rank,
// like the options at create), per-param-group scales, the gradient norm.
#include "common/HyperRanges.h"
#include "exec/Executor.h"
#include "plan/PlanFile.h"

#include <algorithm>
#include <cmath>
#include <fnmatch.h>

namespace dmuon::rt {

namespace {

// Every rank learns every rank's verdict and value hash, so all apply a
// setting or all refuse it.
Status agreeOnSetting(Backend &backend, const Status &verdict, uint64_t hash,
                      const std::string &what) {
  std::vector<uint64_t> verdicts, hashes;
  DMUON_RETURN_IF_ERROR(backend.allGather(static_cast<uint64_t>(verdict.code()), verdicts));
  DMUON_RETURN_IF_ERROR(backend.allGather(hash, hashes));
  DMUON_RETURN_IF_ERROR(verdict);
  for (size_t i = 0; i < verdicts.size(); ++i)
    if (verdicts[i] != DMUON_SUCCESS)
      return Status(static_cast<dmuon_status_t>(verdicts[i]),
                    what + ": rank " + std::to_string(i) + " refused it (see that rank's error)");
  for (size_t i = 0; i < hashes.size(); ++i)
    if (hashes[i] != hashes[0])
      return mismatch(what + ": rank " + std::to_string(i) +
                      " passed other values than rank 0; every rank must pass the same");
  return Status::ok();
}

// Applies `value` unless it is NaN (keep the current one); refuses what is
// outside `range`.
Status takeValue(double value, const char *name, const common::HyperRange &range, float &out) {
  if (std::isnan(value))
    return Status::ok();
  if (std::string e = common::hyperRangeError(name, value, range); !e.empty())
    return invalidArgument("hyper-parameter " + e);
  out = static_cast<float>(value);
  return Status::ok();
}

} // namespace

Status Executor::beginMicroBatch(bool isLast) {
  if (inMicroBatch_)
    return invalidState("begin_micro_batch inside a micro-batch (after its first pre_forward and "
                        "before its last post_backward)");
  nextLast_ = isLast;
  return Status::ok();
}

Status Executor::setHyperParams(const dmuon_hyper_params_t &h) {
  Config next = config_;
  Status verdict = Status::ok();
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  if (verdict)                                                                                     \
    verdict = takeValue(h.name, #name, common::range, next.group.field);
#include "common/HyperParams.def"

  DMUON_RETURN_IF_ERROR(agreeOnSetting(*backend_, verdict, next.hyperHash(), "set_hyper_params"));
  config_.muon = next.muon;
  config_.adamw = next.adamw;
  config_.soap = next.soap;
  config_.shampoo = next.shampoo;
  return Status::ok();
}

void Executor::hyperParams(dmuon_hyper_params_t &out) const {
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  out.name = config_.group.field;
#include "common/HyperParams.def"
}

Status Executor::setParamGroupScale(const std::string &pattern, double lrScale, double wdScale) {
  std::vector<ParamRt *> matched;
  for (ParamRt &p : params_)
    if (::fnmatch(pattern.c_str(), p.name.c_str(), 0) == 0)
      matched.push_back(&p);
  Status verdict = Status::ok();
  if (matched.empty())
    verdict = invalidArgument("set_param_group_scale: no param matches '" + pattern + "'");
  else if (std::string e = common::hyperRangeError("lr_scale", lrScale, common::kGroupScaleRange);
           !e.empty())
    verdict = invalidArgument("set_param_group_scale('" + pattern + "'): " + e);
  else if (std::string e =
               common::hyperRangeError("weight_decay_scale", wdScale, common::kGroupScaleRange);
           !e.empty())
    verdict = invalidArgument("set_param_group_scale('" + pattern + "'): " + e);
  std::string key = pattern;
  key.append(reinterpret_cast<const char *>(&lrScale), sizeof lrScale);
  key.append(reinterpret_cast<const char *>(&wdScale), sizeof wdScale);
  DMUON_RETURN_IF_ERROR(
      agreeOnSetting(*backend_, verdict,
                     planfile::fnv1a64(reinterpret_cast<const uint8_t *>(key.data()), key.size()),
                     "set_param_group_scale('" + pattern + "')"));
  for (ParamRt *p : matched) {
    p->lrScale = static_cast<float>(lrScale);
    p->weightDecayScale = static_cast<float>(wdScale);
  }
  return Status::ok();
}

Status Executor::gradNorm(dmuon_grad_norm_t &out) {
  // Collective. Every rank measures when any rank is inside a step: a rank
  // whose pipeline stage has no hook group runs no micro-batch to tell it
  // so. A rank's refusal is every rank's, so none waits in the measure.
  std::vector<uint64_t> pending;
  DMUON_RETURN_IF_ERROR(
      backend_->allGather(microBatches_ > 0 && !gradientsMeasured_ ? 1 : 0, pending));
  if (std::find(pending.begin(), pending.end(), 1u) != pending.end()) {
    Status ready = gradientsMeasured_
                       ? invalidState("grad_norm: this rank measured this step's gradients "
                                      "already and another has not; call grad_norm on every "
                                      "rank")
                       : backwardComplete();
    DMUON_RETURN_IF_ERROR(agree(ready, "grad_norm"));
    DMUON_RETURN_IF_ERROR(measureGradients());
  }
  if (!normsValid_)
    return invalidState("grad_norm before any backward (run a forward and backward first)");
  out.total = norms_.total();
  out.muon = norms_.muon();
  out.adamw = norms_.adamw();
  out.clip_coef = clipCoef_;
  out.finite = norms_.finite() && !squaresOverflowState(config_, norms_, clipCoef_);
  return Status::ok();
}

} // namespace dmuon::rt
