// A set of a model's params whose values and gradients are views of two flat
// fp32 buffers, so that a baseline moves all of them with one collective (a
// DDP bucket, a ZeRO flat buffer). Autograd accumulates into a defined
// .grad() in place, so the gradients land in the flat buffer without copies.
#ifndef DMUON_BENCH_STEP_FLATPARAMS_H
#define DMUON_BENCH_STEP_FLATPARAMS_H

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace step_bench {

class FlatParams {
public:
  // A param's place in the buffers, as the 2-D matrix Muon sees.
  struct Entry {
    int64_t offset = 0, numel = 0, rows = 0, cols = 0;
  };

  // Moves `params` (their current values) into the buffers, in order; the
  // buffers are zero-padded to a multiple of `padTo` elements.
  FlatParams(const std::vector<torch::Tensor> &params, int64_t padTo);

  float *values() { return values_.data_ptr<float>(); }
  float *grads() { return grads_.data_ptr<float>(); }
  // Elements in each buffer, padding included.
  int64_t size() const { return values_.numel(); }
  const std::vector<Entry> &entries() const { return entries_; }
  void zeroGrads() { grads_.zero_(); }

private:
  torch::Tensor values_, grads_;
  std::vector<Entry> entries_;
};

} // namespace step_bench

#endif
