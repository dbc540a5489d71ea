// SOAP and Shampoo on the owner route, in a model that mixes every update
// rule (mixed-optimizers.toml): 10 steps on one loopback rank against each
// rule written again here in double from its paper and reference code, the
// 4- and 2x2-rank runs bit-identical to the 1-rank run, the state each rank
// holds equal to the plan's count, and the state resumed on another mesh.
#include "LoopbackSupport.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <set>

using namespace dmuon::rt;

namespace {

// Full-rank gradients (SOAP's basis is only defined up to rotations inside
// a repeated eigenvalue, so a low-rank statistic would leave the rotated
// second moment arbitrary): a hash of (param, step, element) in +-0.01.
float noise(int param, int step, int64_t i) {
  uint64_t x = static_cast<uint64_t>(param + 1) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(step + 7) * 0xC2B2AE3D27D4EB4Full ^
               static_cast<uint64_t>(i + 1) * 0x165667B19E3779F9ull;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return 0.01f * (static_cast<float>(x >> 40) / static_cast<float>(1 << 24) * 2.f - 1.f);
}

std::unique_ptr<LoadedPlan> mixedPlan(const std::string &mesh) {
  return loadPlan(std::string(DMUON_MIXED_PLAN_DIR) + "/mixed-" + mesh + ".plan");
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

M transpose(const M &x) {
  M t(x.c, x.r);
  for (int64_t i = 0; i < x.r; ++i)
    for (int64_t j = 0; j < x.c; ++j)
      t(j, i) = x(i, j);
  return t;
}

M mul(const M &x, const M &y) {
  M z(x.r, y.c);
  for (int64_t i = 0; i < x.r; ++i)
    for (int64_t k = 0; k < x.c; ++k)
      for (int64_t j = 0; j < y.c; ++j)
        z(i, j) += x(i, k) * y(k, j);
  return z;
}

M identity(int64_t n) {
  M e(n, n);
  for (int64_t i = 0; i < n; ++i)
    e(i, i) = 1;
  return e;
}

// Cyclic Jacobi: the eigenvectors of symmetric `s` as columns, by
// descending eigenvalue, and the eigenvalues.
std::pair<M, std::vector<double>> eigen(M s) {
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
M orthonormal(M x) {
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

M gradientOf(int param, int step, int64_t rows, int64_t cols) {
  M g(rows, cols);
  for (int64_t k = 0; k < rows * cols; ++k)
    g.a[static_cast<size_t>(k)] = noise(param, step, k);
  return g;
}

M initialOf(int param, int64_t rows, int64_t cols) {
  M w = gradientOf(param, -1, rows, cols);
  for (double &x : w.a)
    x *= 10;
  return w;
}

// s <- keep s + (1 - keep) x x^T (left) or x^T x (right).
void accumulate(M &s, const M &g, bool left, double keep) {
  const M outer = left ? mul(g, transpose(g)) : mul(transpose(g), g);
  for (size_t k = 0; k < s.a.size(); ++k)
    s.a[k] = keep * s.a[k] + (1 - keep) * outer.a[k];
}

// ------------------------------------------------------------ SOAP

// SOAP on one rows x cols matrix for `steps` steps, as its paper's
// Algorithm 3 and reference code (nikhilvyas/SOAP) define it.
// `rates`: a schedule's learning rate and weight decay in place of the plan's.
struct Rates {
  double lr = NAN, weightDecay = NAN;
  double lrOr(double plan) const { return std::isnan(lr) ? plan : lr; }
  double weightDecayOr(double plan) const { return std::isnan(weightDecay) ? plan : weightDecay; }
};

M soapByHand(const dmuon::plan::OptimizerDefaults &od, int param, int64_t rows, int64_t cols,
             int steps, int phase, Rates rates = {}) {
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
    const M g = gradientOf(param, step, rows, cols);
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
    for (size_t k = 0; k < dir.a.size(); ++k)
      dir.a[k] /= std::sqrt(v.a[k]) + eps;
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
M inverseRoot(const M &s, double eps) {
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
M shampooByHand(const dmuon::plan::OptimizerDefaults &od, int param, int64_t rows, int64_t cols,
                int steps, int phase, Rates rates = {}) {
  const double lr = rates.lrOr(od.shampoo_lr()), b1 = od.shampoo_beta1(), b2 = od.shampoo_beta2(),
               eps = od.shampoo_eps(), wd = rates.weightDecayOr(od.shampoo_weight_decay()),
               geps = od.shampoo_graft_eps();
  const int64_t cap = od.shampoo_max_preconditioner_dim(), f = od.shampoo_precondition_frequency();
  const bool hasL = rows <= cap, hasR = cols <= cap;
  M w = initialOf(param, rows, cols), fg(rows, cols), v(rows, cols), l(rows, rows), r(cols, cols);
  M rl = identity(rows), rr = identity(cols);
  for (int step = 0; step < steps; ++step) {
    const int t = step + 1;
    const M g = gradientOf(param, step, rows, cols);
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

constexpr int kSteps = 10;

TEST(Preconditioned, SoapAndShampooEndWhereTheirReferencesAndOneRankEnd) {
  std::unique_ptr<LoadedPlan> one = mixedPlan("1");
  ASSERT_TRUE(one);
  const std::vector<std::vector<float>> want = trainWith(*one, {kSteps, 0, "", ""}, noise);
  const dmuon::plan::OptimizerDefaults &od = *one->root().options()->optimizer();
  int soap = 0, shampoo = 0;
  std::set<int> phases; // staggered refreshes (compiler/passes/Stagger.cpp) are exercised
  for (int i = 0; i < one->numParams(); ++i) {
    const dmuon::plan::Param &p = one->param(i);
    if (p.role() != dmuon::plan::Role::muon)
      continue;
    const dmuon::plan::MatrixOptimizer rule = p.matrix_optimizer();
    if (rule != dmuon::plan::MatrixOptimizer::soap && rule != dmuon::plan::MatrixOptimizer::shampoo)
      continue;
    const M byHand = rule == dmuon::plan::MatrixOptimizer::soap
                         ? soapByHand(od, i, p.rows(), p.cols(), kSteps, p.refresh_phase())
                         : shampooByHand(od, i, p.rows(), p.cols(), kSteps, p.refresh_phase());
    (rule == dmuon::plan::MatrixOptimizer::soap ? soap : shampoo) += 1;
    phases.insert(p.refresh_phase());
    double worst = 0, largest = 0, moved = 0;
    const M start = initialOf(i, p.rows(), p.cols());
    for (size_t k = 0; k < byHand.a.size(); ++k) {
      worst = std::max(worst, std::fabs(want[static_cast<size_t>(i)][k] - byHand.a[k]));
      largest = std::max(largest, std::fabs(byHand.a[k]));
      moved = std::max(moved, std::fabs(byHand.a[k] - start.a[k]));
    }
    EXPECT_LT(worst, 1e-5 * largest) << p.name()->str();
    EXPECT_GT(moved, 1e-3 * largest) << p.name()->str() << " barely moved: a vacuous match";
  }
  EXPECT_EQ(soap, 4);    // soap and soap_wide (one-sided) per block
  EXPECT_EQ(shampoo, 4); // shampoo and shampoo_tall (one-sided) per block
  EXPECT_GE(phases.size(), 3u);
  for (const char *mesh : {"4", "2x2"}) {
    std::unique_ptr<LoadedPlan> plan = mixedPlan(mesh);
    ASSERT_TRUE(plan);
    const std::vector<std::vector<float>> got = trainWith(*plan, {kSteps, 0, "", ""}, noise);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << mesh << ": " << one->param(static_cast<int>(i)).name()->str();
  }
}

// Every rank holds the state its plan counts: each rule's arrays, SOAP's
// and Shampoo's side matrices only where a side is preconditioned.
TEST(Preconditioned, StateIsWhatThePlanCounts) {
  for (const char *mesh : {"1", "4", "2x2"}) {
    std::unique_ptr<LoadedPlan> plan = mixedPlan(mesh);
    ASSERT_TRUE(plan);
    expectStateAsPlanned(*plan, noise, mesh);
  }
}

// Saved on one rank after 4 steps (a SOAP refresh at update 3, Shampoo's
// first root at step 4), resumed on 2x2 for 4 more: where an unbroken run
// of 8 goes, bit for bit.
TEST(Preconditioned, StateResumesOnAnotherMesh) {
  std::unique_ptr<LoadedPlan> one = mixedPlan("1"), four = mixedPlan("2x2");
  ASSERT_TRUE(one && four);
  char tmpl[] = "/tmp/dmuon-preconditioned-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string ckpt = std::string(tmpl) + "/ckpt";
  const std::vector<std::vector<float>> unbroken = trainWith(*one, {8, 0, "", ""}, noise);
  trainWith(*one, {4, 0, "", ckpt}, noise);
  const std::vector<std::vector<float>> resumed = trainWith(*four, {4, 4, ckpt, ""}, noise);
  for (size_t i = 0; i < unbroken.size(); ++i)
    EXPECT_EQ(resumed[i], unbroken[i]) << one->param(static_cast<int>(i)).name()->str();
  std::filesystem::remove_all(tmpl);
}

// A schedule's SOAP and Shampoo rates (dmuon_hyper_params_t version 2) are
// what their steps use, on every mesh, and a checkpoint carries them: set
// once before the first step, saved after 4 and resumed on 2x2 without
// setting them again, the run ends where the references at those rates end.
TEST(Preconditioned, ScheduledRatesReachTheStepsAndTheCheckpoint) {
  std::unique_ptr<LoadedPlan> one = mixedPlan("1"), four = mixedPlan("2x2");
  ASSERT_TRUE(one && four);
  const dmuon::plan::OptimizerDefaults &od = *one->root().options()->optimizer();
  const Rates soapRates{od.soap_lr() * 3, od.soap_weight_decay() / 2};
  const Rates shampooRates{od.shampoo_lr() * 2, od.shampoo_weight_decay() * 4};
  dmuon_hyper_params_t h;
  dmuon_hyper_params_init(&h);
  h.soap_lr = soapRates.lr;
  h.soap_weight_decay = soapRates.weightDecay;
  h.shampoo_lr = shampooRates.lr;
  h.shampoo_weight_decay = shampooRates.weightDecay;
  char tmpl[] = "/tmp/dmuon-scheduled-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string ckpt = std::string(tmpl) + "/ckpt";
  dmuon::rt::Run first(4, 0, "", ckpt);
  first.hyper = h;
  trainWith(*one, first, noise);
  const std::vector<std::vector<float>> got = trainWith(*four, {4, 4, ckpt, ""}, noise);
  std::filesystem::remove_all(tmpl);
  int checked = 0;
  for (int i = 0; i < one->numParams(); ++i) {
    const dmuon::plan::Param &p = one->param(i);
    const dmuon::plan::MatrixOptimizer rule = p.matrix_optimizer();
    if (p.role() != dmuon::plan::Role::muon || (rule != dmuon::plan::MatrixOptimizer::soap &&
                                                rule != dmuon::plan::MatrixOptimizer::shampoo))
      continue;
    const bool soap = rule == dmuon::plan::MatrixOptimizer::soap;
    const M byHand =
        soap ? soapByHand(od, i, p.rows(), p.cols(), 8, p.refresh_phase(), soapRates)
             : shampooByHand(od, i, p.rows(), p.cols(), 8, p.refresh_phase(), shampooRates);
    const M atPlanRates = soap ? soapByHand(od, i, p.rows(), p.cols(), 8, p.refresh_phase())
                               : shampooByHand(od, i, p.rows(), p.cols(), 8, p.refresh_phase());
    double worst = 0, largest = 0, apart = 0;
    for (size_t k = 0; k < byHand.a.size(); ++k) {
      worst = std::max(worst, std::fabs(got[static_cast<size_t>(i)][k] - byHand.a[k]));
      largest = std::max(largest, std::fabs(byHand.a[k]));
      apart = std::max(apart, std::fabs(atPlanRates.a[k] - byHand.a[k]));
    }
    EXPECT_LT(worst, 1e-5 * largest) << p.name()->str();
    EXPECT_GT(apart, 100 * worst) << p.name()->str() << ": the rates make no difference";
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

} // namespace
