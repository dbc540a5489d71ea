#include "core/Config.h"

#include "common/HyperRanges.h"
#include "common/PlanRules.h"
#include "plan/PlanFile.h"

#include <cmath>
#include <cstring>
#include <string>

namespace dmuon::rt {

namespace {

// The C ABI's one rule (dmuon.h, DMUON_UNSET): an unset field takes the
// plan's value.
bool unset(double v) { return std::isnan(v); }
bool unset(int v) { return v == DMUON_UNSET; }
template <typename T, typename P> P pick(T option, P planValue) {
  return unset(option) ? planValue : static_cast<P>(option);
}

// A C enum field as the host wrote it: an int that may hold any value (a C++
// load of an out-of-range enum is undefined), checked before it is used.
template <typename E> int rawValue(const E &field) {
  static_assert(sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

} // namespace

Status Config::resolve(const plan::Plan &plan, const dmuon_runtime_options_t &o, Config &c,
                       Status &verdict) {
  if (!plan.options())
    return {DMUON_ERROR_INVALID_PLAN, "the plan has no options table"};
  const plan::Options &popts = *plan.options();
  const plan::OptimizerDefaults *od = popts.optimizer();
  c.planZ3 = popts.mode() == plan::Mode::z3;
  c.z3 = o.mode == DMUON_MODE_FROM_PLAN ? c.planZ3 : o.mode == DMUON_MODE_Z3;
  c.replicateAsync = pick(o.replicate_async, popts.replicate_async() ? 1 : 0) != 0;
  c.manageAdamW = o.manage_adamw != 0;
  // Each real-valued hyper-parameter: the runtime's option, else the plan's,
  // else (a plan without optimizer defaults) the table's default.
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  c.group.field = static_cast<float>(pick(o.name, double(od ? od->name() : def)));
#define DMUON_HYPER_FIXED DMUON_HYPER_SCHEDULED
#include "common/HyperParams.def"
  MuonHyper &m = c.muon;
  m.nesterov = pick(o.nesterov, (od ? od->nesterov() : true) ? 1 : 0) != 0;
  // The preconditioners' integer settings come from the plan only: its
  // memory figures count the state they size.
  if (od) {
    c.soap.preconditionFrequency = od->soap_precondition_frequency();
    c.soap.maxPreconditionDim = od->soap_max_precond_dim();
    c.shampoo.preconditionFrequency = od->shampoo_precondition_frequency();
    c.shampoo.maxPreconditionDim = od->shampoo_max_preconditioner_dim();
  }
  c.planNsSteps = od ? od->ns_steps() : 5;
  m.nsSteps = pick(o.ns_steps, c.planNsSteps);
  m.matchRmsAdamW = od && od->lr_scale() == plan::LrScale::match_rms_adamw;
  m.coefficients = od && od->ns_coefficients() == plan::NsCoefficients::polar_express
                       ? kernels::NsCoefficients::PolarExpress
                       : kernels::NsCoefficients::Original;
  const int accumulation = rawValue(o.accumulation), clip = rawValue(o.clip_policy),
            form = rawValue(o.momentum_form);
  m.emaMomentum = form == DMUON_MOMENTUM_EMA;
  c.accumulateLocally = accumulation == DMUON_ACCUMULATION_LOCAL;
  c.maxGradNorm = o.max_grad_norm;
  c.clipPolicy = clip == DMUON_CLIP_ALL    ? DMUON_CLIP_ALL
                 : clip == DMUON_CLIP_NONE ? DMUON_CLIP_NONE
                                           : DMUON_CLIP_ADAMW_ONLY;
  verdict = Status::ok();
  // Every numeric option in range (NaN: take the plan's, checked by the
  // verifier); a flag is -1 (the plan's), 0 or 1.
  const std::pair<const char *, int> flags[] = {{"replicate_async", o.replicate_async},
                                                {"nesterov", o.nesterov}};
  for (const auto &[name, value] : flags)
    if (verdict && (value < -1 || value > 1))
      verdict = invalidArgument("options." + std::string(name) + "=" + std::to_string(value) +
                                " must be -1 (the plan's), 0 or 1");
  if (verdict && o.manage_adamw != 0 && o.manage_adamw != 1)
    verdict = invalidArgument("options.manage_adamw=" + std::to_string(o.manage_adamw) +
                              " must be 0 or 1");
  const struct {
    const char *name;
    double value;
    const common::HyperRange &range;
  } hypers[] = {
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  {"options." #name, o.name, common::range},
#define DMUON_HYPER_FIXED DMUON_HYPER_SCHEDULED
#include "common/HyperParams.def"
  };
  for (const auto &h : hypers)
    if (verdict && !unset(h.value))
      if (std::string e = common::hyperRangeError(h.name, h.value, h.range); !e.empty())
        verdict = invalidArgument(e);
  if (!verdict)
    return Status::ok();
  if (!common::nsStepsInRange(m.nsSteps))
    verdict = invalidArgument("ns_steps=" + std::to_string(m.nsSteps) + " must be " +
                              common::nsStepsRangeText());
  else if (accumulation != DMUON_ACCUMULATION_LOCAL && accumulation != DMUON_ACCUMULATION_REDUCE)
    verdict = invalidArgument("options.accumulation " + std::to_string(accumulation) +
                              " is not a dmuon_accumulation_t");
  else if (clip != DMUON_CLIP_ADAMW_ONLY && clip != DMUON_CLIP_ALL && clip != DMUON_CLIP_NONE)
    verdict = invalidArgument("options.clip_policy " + std::to_string(clip) +
                              " is not a dmuon_clip_policy_t");
  else if (form != DMUON_MOMENTUM_SGD && form != DMUON_MOMENTUM_EMA)
    verdict = invalidArgument("options.momentum_form " + std::to_string(form) +
                              " is not a dmuon_momentum_form_t");
  else if (!(o.max_grad_norm >= 0) || std::isinf(o.max_grad_norm))
    verdict = invalidArgument("options.max_grad_norm " + formatNumber(o.max_grad_norm) +
                              " must be a finite value >= 0 (0: no clipping)");
  return Status::ok();
}

uint64_t Config::hash() const {
  std::string b;
  auto put = [&b](const auto &v) { b.append(reinterpret_cast<const char *>(&v), sizeof v); };
  put(z3), put(replicateAsync), put(manageAdamW), put(muon.lr), put(muon.momentum);
  put(muon.weightDecay), put(muon.nesterov), put(muon.matchRmsAdamW), put(muon.coefficients);
  put(muon.nsSteps), put(adamw.lr), put(adamw.beta1), put(adamw.beta2), put(adamw.eps);
  put(adamw.weightDecay), put(muon.emaMomentum), put(accumulateLocally), put(maxGradNorm);
  put(clipPolicy), put(muon.normuonBeta2);
  put(soap.lr), put(soap.beta1), put(soap.beta2), put(soap.shampooBeta), put(soap.eps);
  put(soap.weightDecay), put(soap.preconditionFrequency), put(soap.maxPreconditionDim);
  put(shampoo.lr), put(shampoo.beta1), put(shampoo.beta2), put(shampoo.eps);
  put(shampoo.weightDecay), put(shampoo.graftEps), put(shampoo.preconditionFrequency);
  put(shampoo.maxPreconditionDim);
  return planfile::fnv1a64(reinterpret_cast<const uint8_t *>(b.data()), b.size());
}

uint64_t Config::hyperHash() const {
  const float v[] = {muon.lr,          muon.momentum,     muon.weightDecay,
                     adamw.lr,         adamw.weightDecay, soap.lr,
                     soap.weightDecay, shampoo.lr,        shampoo.weightDecay};
  return planfile::fnv1a64(reinterpret_cast<const uint8_t *>(v), sizeof v);
}

} // namespace dmuon::rt
