// The fused Muon step and AdamW on fp32 CPU buffers.
//
// Scalars that torch computes in Python (double) -- the lr scale, 1 - lr*wd,
// the bias corrections -- are computed in double here too and rounded to
// float once; element-wise arithmetic is fp32.
#include "kernels/cpu/MuonKernels.h"
#include "kernels/LrScale.h"
#include "kernels/cpu/NsScratch.h"

#include <algorithm>
#include <cmath>

namespace dmuon::kernels {
float muonLrScale(int64_t rows, int64_t cols, bool matchRmsAdamW) {
  return static_cast<float>(lrScale(rows, cols, matchRmsAdamW));
}

// Per matrix of the batch: one pass over (buf, g) updates the momentum and
// writes the NS input u into the workspace, NS runs in place on u, and one
// pass over p applies weight decay and the update. The batch's matrices are
// spread over threads (forEachInBatch). Weight decay uses the
// unscaled lr (as torch.optim.Muon); the update uses lr * muonLrScale.
//
// Momentum is the SGD form buf <- mu*buf + g by default. torch.optim.Muon
// keeps the EMA form buf <- mu*buf + (1-mu)*g (lerp) and mixes Nesterov's
// input as (1-mu)*g + mu*buf; from a zero buffer the two forms differ by the
// constant factor (1-mu) in buf and u, which NS's normalization removes, so
// the parameter updates agree up to the 1e-7 epsilon's relative weight.
void muonMomentum(float *buf, const float *g, float *u, int64_t n, const MuonHyper &h) {
  const float mu = h.momentum;
  const float gw = h.emaMomentum ? static_cast<float>(1.0 - static_cast<double>(mu)) : 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float b = mu * buf[i] + gw * g[i];
    buf[i] = b;
    u[i] = h.nesterov ? gw * g[i] + mu * b : b;
  }
}

void muonApply(float *p, const float *ortho, int64_t n, int64_t rows, int64_t cols,
               const MuonHyper &h) {
  const auto decay =
      static_cast<float>(1.0 - static_cast<double>(h.lr) * static_cast<double>(h.weightDecay));
  const auto step =
      static_cast<float>(static_cast<double>(h.lr) * lrScale(rows, cols, h.matchRmsAdamW));
  for (int64_t i = 0; i < n; ++i)
    p[i] = p[i] * decay - step * ortho[i];
}

void muonStep(float *param, float *momentumBuf, const float *grad, int64_t batch, int64_t rows,
              int64_t cols, const MuonHyper &h, NsWorkspace &ws) {
  if (batch <= 0 || rows <= 0 || cols <= 0)
    return;
  const int64_t n = rows * cols;
  // Each matrix's u and NS scratch are private to the thread running it.
  forEachInBatch(batch, n + nsWorkspaceFloats(rows, cols, h.nsForm), ws,
                 [&](int64_t bi, float *scratch) {
                   float *u = scratch;
                   muonMomentum(momentumBuf + bi * n, grad + bi * n, u, n, h);
                   newtonSchulzScratch(u, u, rows, cols, h.nsSteps, h.coefficients, h.nsForm,
                                       u + n);
                   muonApply(param + bi * n, u, n, rows, cols, h);
                 });
}

// torch.optim.AdamW (amsgrad off, maximize off): p *= 1 - lr*wd;
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), bc_i = 1 - b_i^step.
void adamwStep(float *param, float *m, float *v, const float *grad, int64_t n, int64_t step,
               const AdamWHyper &h) {
  if (n <= 0)
    return;
  const auto t = static_cast<double>(std::max<int64_t>(step, 1));
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), t);
  const auto stepSize = static_cast<float>(static_cast<double>(h.lr) / bc1);
  const auto bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  const auto decay =
      static_cast<float>(1.0 - static_cast<double>(h.lr) * static_cast<double>(h.weightDecay));
  const float b1 = h.beta1;
  const float b2 = h.beta2;
  const auto ob1 = static_cast<float>(1.0 - static_cast<double>(h.beta1));
  const auto ob2 = static_cast<float>(1.0 - static_cast<double>(h.beta2));
  const float eps = h.eps;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float mi = b1 * m[i] + ob1 * g;
    const float vi = b2 * v[i] + ob2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc2Sqrt + eps;
    param[i] = param[i] * decay - stepSize * (mi / denom);
  }
}

} // namespace dmuon::kernels
