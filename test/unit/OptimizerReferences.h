// The single-process references of every update rule, written again here
// from each paper and reference code: SOAP and Shampoo in double, NorMuon's
// normalization in double on the CPU kernels' momentum and Newton-Schulz,
// Muon and AdamW by the CPU kernels (checked on their own in
// StepKernelsTest). Shared by the loopback tests (PreconditionedTest.cpp,
// LoopbackTest.cpp) and the MPI run of the mixed manifest
// (test/distributed/mixed_mpi_test.cpp), so both check against one copy.
#ifndef DMUON_TEST_UNIT_OPTIMIZERREFERENCES_H
#define DMUON_TEST_UNIT_OPTIMIZERREFERENCES_H

#include "HashNoise.h"
#include "core/LoadedPlan.h"
#include "kernels/cpu/MuonKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

namespace dmuon::ref {

// Full-rank gradients (SOAP's basis is only defined up to rotations inside
// a repeated eigenvalue, so a low-rank statistic would leave the rotated
// second moment arbitrary): a hash of (param, step, element) in +-0.01.
inline float noise(int param, int step, int64_t i) {
  return 0.01f * dmuon::testhash::hashNoise(param, step + 7, i);
}

// ------------------------------------------------ dense algebra in double

struct M {
  int64_t r = 0, c = 0;
  std::vector<double> a;
  M() = default;
  M(int64_t rows, int64_t cols) : r(rows), c(cols), a(static_cast<size_t>(rows * cols), 0.0) {}
  double &operator()(int64_t i, int64_t j) { return a[static_cast<size_t>(i * c + j)]; }
  double operator()(int64_t i, int64_t j) const { return a[static_cast<size_t>(i * c + j)]; }
};

inline M transpose(const M &x) {
  M t(x.c, x.r);
  for (int64_t i = 0; i < x.r; ++i)
    for (int64_t j = 0; j < x.c; ++j)
      t(j, i) = x(i, j);
  return t;
}

inline M mul(const M &x, const M &y) {
  M z(x.r, y.c);
  for (int64_t i = 0; i < x.r; ++i)
    for (int64_t k = 0; k < x.c; ++k)
      for (int64_t j = 0; j < y.c; ++j)
        z(i, j) += x(i, k) * y(k, j);
  return z;
}

inline M identity(int64_t n) {
  M e(n, n);
  for (int64_t i = 0; i < n; ++i)
    e(i, i) = 1;
  return e;
}

// Cyclic Jacobi: the eigenvectors of symmetric `s` as columns, by
// descending eigenvalue, and the eigenvalues.
inline std::pair<M, std::vector<double>> eigen(M s) {
  const int64_t n = s.r;
  M v = identity(n);
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q)
        off += s(p, q) * s(p, q);
    if (off < 1e-60)
      break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        if (std::fabs(s(p, q)) < 1e-300)
          continue;
        const double theta = (s(q, q) - s(p, p)) / (2 * s(p, q));
        const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), sn = t * c;
        for (int64_t k = 0; k < n; ++k) { // s <- J^T s J
          const double skp = s(k, p), skq = s(k, q);
          s(k, p) = c * skp - sn * skq;
          s(k, q) = sn * skp + c * skq;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double spk = s(p, k), sqk = s(q, k);
          s(p, k) = c * spk - sn * sqk;
          s(q, k) = sn * spk + c * sqk;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double vkp = v(k, p), vkq = v(k, q);
          v(k, p) = c * vkp - sn * vkq;
          v(k, q) = sn * vkp + c * vkq;
        }
      }
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s(a, a) > s(b, b); });
  M sorted(n, n);
  std::vector<double> values;
  for (int64_t j = 0; j < n; ++j) {
    values.push_back(s(order[j], order[j]));
    for (int64_t i = 0; i < n; ++i)
      sorted(i, j) = v(i, order[j]);
  }
  return {sorted, values};
}

// The Q of x's QR factorization, by modified Gram-Schmidt.
inline M orthonormal(M x) {
  for (int64_t j = 0; j < x.c; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < x.r; ++i)
        dot += x(i, k) * x(i, j);
      for (int64_t i = 0; i < x.r; ++i)
        x(i, j) -= dot * x(i, k);
    }
    double norm = 0;
    for (int64_t i = 0; i < x.r; ++i)
      norm += x(i, j) * x(i, j);
    for (int64_t i = 0; i < x.r; ++i)
      x(i, j) /= std::sqrt(norm);
  }
  return x;
}

inline M gradientOf(int param, int step, int64_t rows, int64_t cols) {
  M g(rows, cols);
  for (int64_t k = 0; k < rows * cols; ++k)
    g.a[static_cast<size_t>(k)] = noise(param, step, k);
  return g;
}

// The gradient of (param, step, rows, cols) a reference trains on.
using GradientFn = std::function<M(int, int, int64_t, int64_t)>;

inline M initialOf(int param, int64_t rows, int64_t cols) {
  M w = gradientOf(param, -1, rows, cols);
  for (double &x : w.a)
    x *= 10;
  return w;
}

// s <- keep s + (1 - keep) x x^T (left) or x^T x (right).
inline void accumulate(M &s, const M &g, bool left, double keep) {
  const M outer = left ? mul(g, transpose(g)) : mul(transpose(g), g);
  for (size_t k = 0; k < s.a.size(); ++k)
    s.a[k] = keep * s.a[k] + (1 - keep) * outer.a[k];
}

// ------------------------------------------------------------ SOAP

// SOAP on one rows x cols matrix for `steps` steps, as its paper's
// Algorithm 3 and reference code (nikhilvyas/SOAP) define it, each entry of
// the rotated direction held to Adam's bound unless `adamBound` is false.
// `rates`: a schedule's learning rate and weight decay in place of the plan's.
struct Rates {
  double lr = NAN, weightDecay = NAN;
  double lrOr(double plan) const { return std::isnan(lr) ? plan : lr; }
  double weightDecayOr(double plan) const { return std::isnan(weightDecay) ? plan : weightDecay; }
};

inline M soapByHand(const dmuon::plan::OptimizerDefaults &od, int param, int64_t rows, int64_t cols,
                    int steps, int phase, Rates rates = {},
                    const GradientFn &gradients = gradientOf, bool adamBound = true) {
  const double lr = rates.lrOr(od.soap_lr()), b1 = od.soap_beta1(), b2 = od.soap_beta2(),
               sb = od.soap_shampoo_beta(), eps = od.soap_eps(),
               wd = rates.weightDecayOr(od.soap_weight_decay());
  const int64_t cap = od.soap_max_precond_dim();
  const bool hasL = rows <= cap, hasR = cols <= cap;
  M w = initialOf(param, rows, cols), m(rows, cols), v(rows, cols), l(rows, rows), r(cols, cols);
  M ql = identity(rows), qr = identity(cols);
  auto into = [&](const M &x) { return mul(mul(transpose(ql), x), qr); };
  auto back = [&](const M &x) { return mul(mul(ql, x), transpose(qr)); };
  for (int step = 0; step < steps; ++step) {
    const M g = gradients(param, step, rows, cols);
    if (step == 0) { // statistics and their eigenvectors only
      if (hasL)
        accumulate(l, g, true, sb), ql = eigen(l).first;
      if (hasR)
        accumulate(r, g, false, sb), qr = eigen(r).first;
      continue;
    }
    const int t = step;
    const M gr = into(g);
    for (size_t k = 0; k < m.a.size(); ++k) {
      m.a[k] = b1 * m.a[k] + (1 - b1) * g.a[k];
      v.a[k] = b2 * v.a[k] + (1 - b2) * gr.a[k] * gr.a[k];
    }
    M dir = into(m);
    // Held to Adam's bound on |m_t| / sqrt(v_t) (dmuon's one departure from
    // the paper, docs/optimizers.md; `adamBound` false: the paper's SOAP).
    const double ratio = b1 / std::sqrt(b2),
                 bound = (1 - b1) / std::sqrt(1 - b2) * (1 - std::pow(ratio, t)) / (1 - ratio);
    for (size_t k = 0; k < dir.a.size(); ++k) {
      dir.a[k] /= std::sqrt(v.a[k]) + eps;
      if (adamBound)
        dir.a[k] = std::clamp(dir.a[k], -bound, bound);
    }
    dir = back(dir);
    const double size = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (size_t k = 0; k < w.a.size(); ++k)
      w.a[k] = (w.a[k] - size * dir.a[k]) * (1 - lr * wd);
    if (hasL)
      accumulate(l, g, true, sb);
    if (hasR)
      accumulate(r, g, false, sb);
    if (t % od.soap_precondition_frequency() != phase)
      continue;
    // One power iteration, the columns by estimated eigenvalue, a QR.
    auto refresh = [&](const M &s, M &q, bool columns) {
      const M power = mul(s, q);
      const int64_t d = q.r;
      std::vector<double> estimate(static_cast<size_t>(d), 0.0);
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j)
          estimate[static_cast<size_t>(j)] += q(i, j) * power(i, j);
      std::vector<int64_t> order(static_cast<size_t>(d));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return estimate[static_cast<size_t>(a)] > estimate[static_cast<size_t>(b)];
      });
      M sorted(d, d), vs = v;
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j)
          sorted(i, j) = power(i, order[j]);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          vs(i, j) = columns ? v(i, order[j]) : v(order[i], j);
      v = vs;
      q = orthonormal(sorted);
    };
    if (hasL)
      refresh(l, ql, false);
    if (hasR)
      refresh(r, qr, true);
  }
  return w;
}

// ---------------------------------------------------------- Shampoo

// (s + eps I)^-1/4 by its eigendecomposition (negative eigenvalues as 0).
inline M inverseRoot(const M &s, double eps) {
  auto [q, values] = eigen(s);
  M scaled = q;
  for (int64_t i = 0; i < q.r; ++i)
    for (int64_t j = 0; j < q.c; ++j)
      scaled(i, j) *= std::pow(std::max(0.0, values[static_cast<size_t>(j)]) + eps, -0.25);
  return mul(scaled, transpose(q));
}

// Shampoo with Adam grafting, as Distributed Shampoo's step orders it:
// statistics, filtered gradient, graft, roots every f steps from step f,
// L^-1/4 F R^-1/4 at the graft's norm, decoupled decay.
inline M shampooByHand(const dmuon::plan::OptimizerDefaults &od, int param, int64_t rows,
                       int64_t cols, int steps, int phase, Rates rates = {},
                       const GradientFn &gradients = gradientOf) {
  const double lr = rates.lrOr(od.shampoo_lr()), b1 = od.shampoo_beta1(), b2 = od.shampoo_beta2(),
               eps = od.shampoo_eps(), wd = rates.weightDecayOr(od.shampoo_weight_decay()),
               geps = od.shampoo_graft_eps();
  const int64_t cap = od.shampoo_max_preconditioner_dim(), f = od.shampoo_precondition_frequency();
  const bool hasL = rows <= cap, hasR = cols <= cap;
  M w = initialOf(param, rows, cols), fg(rows, cols), v(rows, cols), l(rows, rows), r(cols, cols);
  M rl = identity(rows), rr = identity(cols);
  for (int step = 0; step < steps; ++step) {
    const int t = step + 1;
    const M g = gradients(param, step, rows, cols);
    if (hasL)
      accumulate(l, g, true, b2);
    if (hasR)
      accumulate(r, g, false, b2);
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    M filtered(rows, cols), graft(rows, cols);
    for (size_t k = 0; k < g.a.size(); ++k) {
      fg.a[k] = b1 * fg.a[k] + (1 - b1) * g.a[k];
      filtered.a[k] = fg.a[k] / bc1;
      v.a[k] = b2 * v.a[k] + (1 - b2) * g.a[k] * g.a[k];
      graft.a[k] = filtered.a[k] / (std::sqrt(v.a[k] / bc2) + geps);
    }
    if (t % f == phase) {
      auto corrected = [&](const M &s) {
        M c = s;
        for (double &x : c.a)
          x /= bc2;
        return c;
      };
      if (hasL)
        rl = inverseRoot(corrected(l), eps);
      if (hasR)
        rr = inverseRoot(corrected(r), eps);
    }
    M dir = graft; // Adam's alone, also where neither side is preconditioned
    if (t >= f && (hasL || hasR)) {
      dir = mul(mul(rl, filtered), rr);
      double gn = 0, dn = 0;
      for (size_t k = 0; k < dir.a.size(); ++k)
        gn += graft.a[k] * graft.a[k], dn += dir.a[k] * dir.a[k];
      for (double &x : dir.a)
        x *= std::sqrt(gn / dn);
    }
    for (size_t k = 0; k < w.a.size(); ++k)
      w.a[k] = w.a[k] * (1 - lr * wd) - lr * dir.a[k];
  }
  return w;
}

// NorMuon as its paper writes it, in double, on the orthogonalized update
// `o` of one rows x cols matrix with second moment `v`.
inline void normuonReference(std::vector<double> &o, std::vector<double> &v, int64_t rows,
                             int64_t cols, double beta2) {
  double before = 0;
  for (double x : o)
    before += x * x;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0;
    for (int64_t c = 0; c < cols; ++c)
      mean += o[r * cols + c] * o[r * cols + c] / static_cast<double>(cols);
    v[r] = beta2 * v[r] + (1 - beta2) * mean;
    for (int64_t c = 0; c < cols; ++c)
      o[r * cols + c] /= std::sqrt(v[r]) + 1e-10;
  }
  double after = 0;
  for (double x : o)
    after += x * x;
  for (double &x : o)
    x *= std::sqrt(before) / (std::sqrt(after) + 1e-10);
}

// A value per (param, step, element): step -1 (times 10) the initial values,
// each step's gradient otherwise.
using ValueFn = std::function<float(int param, int step, int64_t i)>;

inline int64_t globalNumel(const dmuon::plan::Param &p) {
  int64_t n = 1;
  for (int64_t d : *p.shape())
    n *= d;
  return n;
}

// The plan's Muon settings as the CPU kernels take them.
inline dmuon::kernels::MuonHyper muonHyperOf(const dmuon::plan::OptimizerDefaults &od) {
  dmuon::kernels::MuonHyper h;
  h.lr = static_cast<float>(od.lr());
  h.momentum = static_cast<float>(od.momentum());
  h.weightDecay = static_cast<float>(od.weight_decay());
  h.nesterov = od.nesterov();
  h.nsSteps = od.ns_steps();
  h.matchRmsAdamW = od.lr_scale() == dmuon::plan::LrScale::match_rms_adamw;
  h.coefficients = od.ns_coefficients() == dmuon::plan::NsCoefficients::polar_express
                       ? dmuon::kernels::NsCoefficients::PolarExpress
                       : dmuon::kernels::NsCoefficients::Original;
  return h;
}

// A Muon (`normalize` false) or NorMuon matrix of the plan stepped `steps`
// times from `valueOf`'s gradients: momentum and NS by the CPU kernels Muon
// uses, NorMuon's normalization and the update in double.
inline std::vector<double> muonByHand(const dmuon::rt::LoadedPlan &plan, int i, int steps,
                                      const ValueFn &valueOf, bool normalize) {
  const dmuon::plan::Param &p = plan.param(i);
  const dmuon::plan::OptimizerDefaults &od = *plan.root().options()->optimizer();
  const int64_t rows = p.rows(), cols = p.cols(), n = rows * cols;
  const dmuon::kernels::MuonHyper h = muonHyperOf(od);
  std::vector<double> w(static_cast<size_t>(n)), v(static_cast<size_t>(rows), 0.0);
  std::vector<float> momentum(static_cast<size_t>(n), 0.f), g(static_cast<size_t>(n)),
      u(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k)
    w[k] = 10 * valueOf(i, -1, k);
  dmuon::kernels::NsWorkspace ws;
  const double scale = dmuon::kernels::muonLrScale(rows, cols, h.matchRmsAdamW);
  for (int step = 0; step < steps; ++step) {
    for (int64_t k = 0; k < n; ++k)
      g[k] = valueOf(i, step, k);
    dmuon::kernels::muonMomentum(momentum.data(), g.data(), u.data(), n, h);
    dmuon::kernels::newtonSchulz(u.data(), u.data(), rows, cols, h.nsSteps, h.coefficients, ws);
    std::vector<double> o(u.begin(), u.end());
    if (normalize)
      normuonReference(o, v, rows, cols, od.normuon_beta2());
    for (int64_t k = 0; k < n; ++k)
      w[k] = w[k] * (1 - od.lr() * od.weight_decay()) - od.lr() * scale * o[k];
  }
  return w;
}

// An AdamW param of the plan (any shape) stepped `steps` times by the CPU
// kernel at the plan's AdamW settings.
inline std::vector<double> adamwByHand(const dmuon::rt::LoadedPlan &plan, int i, int steps,
                                       const ValueFn &valueOf) {
  const dmuon::plan::OptimizerDefaults &od = *plan.root().options()->optimizer();
  dmuon::kernels::AdamWHyper h;
  h.lr = static_cast<float>(od.adamw_lr());
  h.beta1 = static_cast<float>(od.adamw_beta1());
  h.beta2 = static_cast<float>(od.adamw_beta2());
  h.eps = static_cast<float>(od.adamw_eps());
  h.weightDecay = static_cast<float>(od.adamw_weight_decay());
  const int64_t n = globalNumel(plan.param(i));
  std::vector<float> w(static_cast<size_t>(n)), m(w.size(), 0.f), v(w.size(), 0.f), g(w.size());
  for (int64_t k = 0; k < n; ++k)
    w[k] = 10 * valueOf(i, -1, k);
  for (int step = 0; step < steps; ++step) {
    for (int64_t k = 0; k < n; ++k)
      g[k] = valueOf(i, step, k);
    dmuon::kernels::adamwStep(w.data(), m.data(), v.data(), g.data(), n, step + 1, h);
  }
  return {w.begin(), w.end()};
}

// Param `i` of `plan` after `steps` steps of its own rule on noise()'s
// gradients (SOAP's and Shampoo's refreshes at the param's refresh_phase).
inline std::vector<double> referenceOf(const dmuon::rt::LoadedPlan &plan, int i, int steps) {
  const dmuon::plan::Param &p = plan.param(i);
  const dmuon::plan::OptimizerDefaults &od = *plan.root().options()->optimizer();
  if (p.role() != dmuon::plan::Role::muon)
    return adamwByHand(plan, i, steps, noise);
  switch (p.matrix_optimizer()) {
  case dmuon::plan::MatrixOptimizer::soap:
    return soapByHand(od, i, p.rows(), p.cols(), steps, p.refresh_phase()).a;
  case dmuon::plan::MatrixOptimizer::shampoo:
    return shampooByHand(od, i, p.rows(), p.cols(), steps, p.refresh_phase()).a;
  case dmuon::plan::MatrixOptimizer::normuon:
    return muonByHand(plan, i, steps, noise, true);
  default:
    return muonByHand(plan, i, steps, noise, false);
  }
}

} // namespace dmuon::ref

#endif
