// The matrix rules: momentum, then Newton-Schulz orthogonalization of the
// update on the whole matrix. Muon applies it as it is; NorMuon first
// normalizes it per row by a running second moment, keeping its norm. A
// matrix this rank holds whole (or as its local matrix) runs here; Muon's
// matrices sharded on a matrix dim over a model-parallel group are gathered
// for NS first (optim/GatheredMuon).
#ifndef DMUON_RUNTIME_OPTIM_MUON_H
#define DMUON_RUNTIME_OPTIM_MUON_H

#include "optim/GatheredMuon.h"
#include "optim/Optimizer.h"

namespace dmuon::rt {

// What both rules share: NS scratch sized once for the largest matrix this
// rank orthogonalizes, and the NS flops counted.
class MatrixRule : public ParamOptimizer {
public:
  Status reserve(const Context &ctx, const std::vector<ParamRt> &params) override;
  // NS flops this rank ran so far.
  double nsFlops() const { return nsFlops_; }

protected:
  // The matrix NS runs on: the full one when it is gathered, else the local one.
  static MatrixShape nsShape(const ParamRt &p);
  void countNs(const Context &ctx, const ParamRt &p);
  GatherScratch scratch_;
  DeviceArray blockScratch_; // blocks gathered into one batch (optim/MatrixBlocks.h)

private:
  double nsFlops_ = 0;
};

class Muon final : public MatrixRule {
public:
  std::span<const StateField> fields() const override;
  Status step(const Context &ctx, ParamRt &p, const float *grad, int64_t n,
              int64_t adamwStep) override;
};

// NorMuon (Li et al. 2025): Muon's orthogonalized update, each row divided by
// the root of its running mean square (beta2: normuon_beta2), rescaled to the
// orthogonalized update's Frobenius norm; then Muon's lr scale and decay.
class NorMuon final : public MatrixRule {
public:
  std::span<const StateField> fields() const override;
  // Also the orthogonalized update's scratch, for the largest matrix.
  Status reserve(const Context &ctx, const std::vector<ParamRt> &params) override;
  Status step(const Context &ctx, ParamRt &p, const float *grad, int64_t n,
              int64_t adamwStep) override;
};

} // namespace dmuon::rt

#endif
