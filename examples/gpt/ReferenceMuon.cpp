#include "ReferenceMuon.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace gpt {

torch::Tensor newtonSchulz5(const torch::Tensor &g, int steps) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  const double norm = g.to(torch::kDouble).norm().item<double>();
  torch::Tensor x = g * static_cast<float>(1.0 / (norm + 1e-7));
  const bool transposed = g.size(0) > g.size(1);
  if (transposed)
    x = x.t().contiguous();
  for (int k = 0; k < steps; ++k) {
    torch::Tensor A = x.mm(x.t());
    // B = bA + cA^2 and X = aX + BX as single GEMMs with beta, as the kernel
    // calls them: the same BLAS then rounds the same way.
    torch::Tensor B = torch::addmm(A, A, A, /*beta=*/b, /*alpha=*/c);
    x = torch::addmm(x, B, x, /*beta=*/a, /*alpha=*/1.0);
  }
  return transposed ? x.t().contiguous() : x;
}

ReferenceMuon::ReferenceMuon(std::vector<torch::Tensor> params, const MuonOptions &options)
    : params_(std::move(params)), o_(options) {
  for (const torch::Tensor &p : params_) {
    if (p.dim() != 2)
      throw std::invalid_argument("ReferenceMuon takes 2-D params");
    buffers_.push_back(torch::zeros_like(p));
  }
}

void ReferenceMuon::step() {
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor &p = params_[i];
    if (!p.grad().defined())
      continue;
    const torch::Tensor &g = p.grad();
    torch::Tensor &buf = buffers_[i];
    buf.mul_(o_.momentum).add_(g);
    torch::Tensor u = o_.nesterov ? g + o_.momentum * buf : buf;
    torch::Tensor ortho = newtonSchulz5(u, o_.nsSteps);
    const double rows = double(p.size(0)), cols = double(p.size(1));
    const double scale = std::sqrt(std::max(1.0, rows / cols));
    // Two roundings, p*decay and step*ortho, then the difference: add_ with
    // alpha may fuse into an FMA, the kernel does not.
    p.mul_(1.0 - o_.lr * o_.weightDecay).sub_(ortho * (o_.lr * scale));
  }
}

void ReferenceMuon::zeroGrad() {
  for (torch::Tensor &p : params_)
    if (p.grad().defined())
      p.mutable_grad().zero_();
}

} // namespace gpt
