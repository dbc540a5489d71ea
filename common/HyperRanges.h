// The allowed values of the optimizer's hyper-parameters, wherever they come
// from: dmuonc's options (recorded in the plan), the plan's
// options.optimizer (the verifier), the runtime's options and
// set_hyper_params, and a checkpoint's manifest. The steps apply them in
// fp32, so every bound is a finite fp32 value.
#ifndef DMUON_COMMON_HYPERRANGES_H
#define DMUON_COMMON_HYPERRANGES_H

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <string>

namespace dmuon::common {

// The closed or half-open interval a value must lie in; NaN and infinities
// never do.
struct HyperRange {
  double lo;
  bool loOpen;
  double hi;
  bool hiOpen;

  bool contains(double v) const {
    return std::isfinite(v) && (loOpen ? v > lo : v >= lo) && (hiOpen ? v < hi : v <= hi);
  }
  // "a number in [0, 1)", "a finite fp32 number >= 0".
  std::string text() const {
    char t[64];
    if (hi == FLT_MAX && !hiOpen)
      std::snprintf(t, sizeof t, "a finite fp32 number %s %g", loOpen ? ">" : ">=", lo);
    else
      std::snprintf(t, sizeof t, "a number in %c%g, %g%c", loOpen ? '(' : '[', lo, hi,
                    hiOpen ? ')' : ']');
    return t;
  }
};

// Learning rates and (decoupled) weight decays: [0, 10]. No published
// recipe of these optimizers goes above 1; 10 leaves an order of magnitude
// and stops a typo (lr=3e38 is finite in fp32) from turning every param
// into Inf while each step succeeds.
inline constexpr HyperRange kRateRange{0, false, 10, false};
// Momentum and AdamW's betas: an average's decay, [0, 1).
inline constexpr HyperRange kDecayRange{0, false, 1, true};
// Epsilons: (0, 1] (they keep an update's division finite; above 1 they
// would dominate any normalized gradient).
inline constexpr HyperRange kEpsRange{0, true, 1, false};
// set_param_group_scale's factors on a group's lr and weight decay.
inline constexpr HyperRange kGroupScaleRange{0, false, 100, false};
// QK-Clip's threshold on a head's max attention logit: > 0.
inline constexpr HyperRange kQkClipTauRange{0, true, FLT_MAX, false};

// Empty if `value` lies in `range`, else "<name>=<value> must be a number
// in [0, 1)".
inline std::string hyperRangeError(const char *name, double value, const HyperRange &range) {
  if (range.contains(value))
    return {};
  char t[64];
  std::snprintf(t, sizeof t, "%g", value);
  return std::string(name) + "=" + t + " must be " + range.text();
}

} // namespace dmuon::common

#endif
