// The settings one runtime runs with: the plan's defaults, overridden by the
// host's options. Every rank must run with the same ones (hash()).
#ifndef DMUON_RUNTIME_CORE_CONFIG_H
#define DMUON_RUNTIME_CORE_CONFIG_H

#include "base/Status.h"
#include "dmuon/plan_generated.h"
#include "hal/Device.h"

#include <cstdint>

namespace dmuon::rt {

struct Config {
  bool z3 = true, planZ3 = true; // ours and the plan's (its figures price its own)
  bool replicateAsync = true;
  bool manageAdamW = true;
  int planNsSteps = 5; // the plan's NS costs are priced at this count
  MuonHyper muon;
  AdamWHyper adamw;
  kernels::SoapHyper soap;
  kernels::ShampooHyper shampoo;
  bool accumulateLocally = true; // DMUON_ACCUMULATION_LOCAL
  double maxGradNorm = 0;        // 0: no clipping
  dmuon_clip_policy_t clipPolicy = DMUON_CLIP_ADAMW_ONLY;

  // Resolves the settings; a refused option is returned in `verdict` rather
  // than as the result, so every rank can learn every rank's verdict first.
  static Status resolve(const dmuon::plan::Plan &plan, const dmuon_runtime_options_t &options,
                        Config &out, Status &verdict);
  uint64_t hash() const;
  // Of the values a schedule changes (dmuon_hyper_params_t).
  uint64_t hyperHash() const;

};

} // namespace dmuon::rt

#endif
