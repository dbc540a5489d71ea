// The preconditioned matrix rules: SOAP and Shampoo. Both keep Shampoo's
// statistics of each side of the matrix (L = E[G G^T], R = E[G^T G]) on the
// param's one owner, and refresh a basis from them every
// precondition_frequency steps; a side longer than its max dim keeps no
// statistics and is left as it is. The math is the device's linear algebra
// (hal/Device.h), so it runs wherever the device has those kernels.
#ifndef DMUON_RUNTIME_OPTIM_PRECONDITIONED_H
#define DMUON_RUNTIME_OPTIM_PRECONDITIONED_H

#include "optim/Optimizer.h"

namespace dmuon::rt {

// What both rules share: scratch sized once for the largest matrix they
// step here, the projections through a side's matrix, and the flops run.
class PreconditionedRule : public ParamOptimizer {
public:
  Status reserve(const Context &ctx, const std::vector<ParamRt> &params) override;
  // The longest side this rule preconditions (the plan's max dim).
  virtual int64_t maxDim(const Context &ctx) const = 0;
  double flops() const { return flops_; }

protected:
  // One matrix of the param's view: its rows x cols values and the side
  // matrices (null for a side left as it is).
  struct Matrix {
    int64_t rows, cols;
    const float *left, *right;
  };
  // out = left^T x right (`back`: left x right^T): into or out of the basis.
  Status rotate(const Context &ctx, const Matrix &m, const float *x, float *out, bool back);
  // s <- keep * s + (1 - keep) * (G G^T or G^T G) for each side kept.
  Status accumulateStatistics(const Context &ctx, int64_t rows, int64_t cols, const float *g,
                              float *left, float *right, float keep);
  void count(double f) { flops_ += f; }
  // Per-matrix scratch: three of rows x cols (and rotate's own), two of
  // d x d, d eigenvalues, and two doubles for norms.
  DeviceArray a_, b_, c_, tmp_, square_, square2_, values_, norms_;

private:
  double flops_ = 0;
};

// SOAP (Vyas et al. 2024, Algorithm 3 and its reference code): Adam run in
// the eigenbasis (QL, QR) of the statistics. The first step only gathers
// statistics and takes their eigenvectors; every later one rotates the
// gradient and Adam's first moment in, updates the second moment there,
// rotates Adam's direction back (bias-corrected step size, then decoupled
// decay), and updates the statistics; every precondition_frequency updates
// the basis is refreshed by one power iteration and a QR, the second moment
// re-ordered with it.
class Soap final : public PreconditionedRule {
public:
  std::span<const StateField> fields() const override;
  int64_t maxDim(const Context &ctx) const override;
  Status step(const Context &ctx, ParamRt &p, const float *grad, int64_t n,
              int64_t stepCount) override;

private:
  Status refreshBasis(const Context &ctx, int64_t d, const float *statistics, float *basis,
                      float *v, int64_t rows, int64_t cols, bool columns);
};

// Shampoo with Adam grafting, as Distributed Shampoo configures it
// (docs/optimizers.md): the filtered gradient F (beta1), the statistics
// (beta2, bias-corrected), their inverse fourth roots from an
// eigendecomposition every precondition_frequency steps (eps added to each
// eigenvalue), and the direction L^-1/4 F R^-1/4 scaled to the norm of
// Adam's direction (the graft); Adam's direction alone before the first
// root. Decoupled weight decay.
class Shampoo final : public PreconditionedRule {
public:
  std::span<const StateField> fields() const override;
  int64_t maxDim(const Context &ctx) const override;
  Status step(const Context &ctx, ParamRt &p, const float *grad, int64_t n,
              int64_t stepCount) override;

private:
  Status inverseRoot(const Context &ctx, int64_t d, const float *statistics, float scale,
                     float *root);
};

} // namespace dmuon::rt

#endif
