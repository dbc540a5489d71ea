// The optimizer settings of the MPI tests' runs and of their single-process
// references (the tiny plans are compiled with the same: --adamw-lr=0.01 and
// the Muon defaults), and the kernels' hyper-parameter structs made from them.
#ifndef DMUON_TEST_DISTRIBUTED_REFERENCEHYPER_H
#define DMUON_TEST_DISTRIBUTED_REFERENCEHYPER_H

#include "kernels/cpu/MuonKernels.h"

namespace reference {

struct Hyper {
  double lr = 0.02, momentum = 0.95, weightDecay = 0.01;
  int nesterov = 1, nsSteps = 5;
  double adamwLr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, adamwWeightDecay = 0.01;
};

inline const Hyper kHyper;

inline dmuon::kernels::MuonHyper muonHyper() {
  dmuon::kernels::MuonHyper mh;
  mh.lr = static_cast<float>(kHyper.lr);
  mh.momentum = static_cast<float>(kHyper.momentum);
  mh.weightDecay = static_cast<float>(kHyper.weightDecay);
  mh.nesterov = kHyper.nesterov != 0;
  mh.nsSteps = kHyper.nsSteps;
  mh.matchRmsAdamW = false; // the plans' default lr scale
  mh.coefficients = dmuon::kernels::NsCoefficients::Original;
  return mh;
}

inline dmuon::kernels::AdamWHyper adamwHyper() {
  dmuon::kernels::AdamWHyper ah;
  ah.lr = static_cast<float>(kHyper.adamwLr);
  ah.beta1 = static_cast<float>(kHyper.beta1);
  ah.beta2 = static_cast<float>(kHyper.beta2);
  ah.eps = static_cast<float>(kHyper.eps);
  ah.weightDecay = static_cast<float>(kHyper.adamwWeightDecay);
  return ah;
}

} // namespace reference

#endif
