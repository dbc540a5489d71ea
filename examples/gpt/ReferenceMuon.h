// Muon in a few lines of libtorch, for the single-process reference runs.
// It computes what libdmuon's CPU kernels compute (kernels/cpu/MuonKernels.h,
// docs/runtime.md#numerics), with the same roundings where they are observable:
//   buf <- mu*buf + g;  u = nesterov ? g + mu*buf : buf
//   X = u / (||u||_F + 1e-7)   (the norm accumulated in double, the scale
//                              rounded to float once, as the kernel does)
//   X = X^T if rows > cols;  5 x: A = X X^T; B = bA + cA^2; X = aX + BX
//   p <- p*(1 - lr*wd) - lr*sqrt(max(1, rows/cols)) * NS(u)
// with (a, b, c) = (3.4445, -4.7750, 2.0315). AdamW for the other params is
// torch::optim::AdamW itself.
#ifndef DMUON_EXAMPLES_GPT_REFERENCEMUON_H
#define DMUON_EXAMPLES_GPT_REFERENCEMUON_H

#include <torch/torch.h>

#include <vector>

namespace gpt {

struct MuonOptions {
  double lr = 0.02;
  double momentum = 0.95;
  double weightDecay = 0.0;
  bool nesterov = true;
  int nsSteps = 5;
};

// Newton-Schulz orthogonalization of one matrix (fp32).
torch::Tensor newtonSchulz5(const torch::Tensor &g, int steps);

class ReferenceMuon {
public:
  ReferenceMuon(std::vector<torch::Tensor> params, const MuonOptions &options);
  // One step on every param with a gradient.
  void step();
  void zeroGrad();
  void setLr(double lr) { o_.lr = lr; }

private:
  std::vector<torch::Tensor> params_, buffers_;
  MuonOptions o_;
};

} // namespace gpt

#endif
