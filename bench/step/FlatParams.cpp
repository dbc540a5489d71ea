#include "FlatParams.h"

#include <stdexcept>

namespace step_bench {

FlatParams::FlatParams(const std::vector<torch::Tensor> &params, int64_t padTo) {
  int64_t total = 0;
  for (const torch::Tensor &p : params) {
    if (p.scalar_type() != torch::kFloat)
      throw std::runtime_error("FlatParams: f32 params only");
    Entry e;
    e.offset = total;
    e.numel = p.numel();
    e.rows = p.dim() > 0 ? p.size(0) : 1;
    e.cols = e.rows > 0 ? e.numel / e.rows : 0;
    entries_.push_back(e);
    total += e.numel;
  }
  const int64_t padded = (total + padTo - 1) / padTo * padTo;
  values_ = torch::zeros({padded}, torch::kFloat);
  grads_ = torch::zeros({padded}, torch::kFloat);
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor p = params[i];
    const Entry &e = entries_[i];
    torch::Tensor value = values_.narrow(0, e.offset, e.numel).view(p.sizes());
    value.copy_(p);
    p.set_data(value);
    p.mutable_grad() = grads_.narrow(0, e.offset, e.numel).view(p.sizes());
  }
}

} // namespace step_bench
