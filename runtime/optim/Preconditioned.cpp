#include "optim/Preconditioned.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dmuon::rt {

namespace {

// The plan counts all of both rules' state with the momentum
// (common/MatrixOptimizers.h).
constexpr StateField kSoapFields[] = {
    {ckpt::Kind::SoapExpAvg, &MemoryAccounts::momentum},
    {ckpt::Kind::SoapExpAvgSq, &MemoryAccounts::momentum},
    {ckpt::Kind::SoapLeft, &MemoryAccounts::momentum, StateShape::Left},
    {ckpt::Kind::SoapLeftBasis, &MemoryAccounts::momentum, StateShape::Left},
    {ckpt::Kind::SoapRight, &MemoryAccounts::momentum, StateShape::Right},
    {ckpt::Kind::SoapRightBasis, &MemoryAccounts::momentum, StateShape::Right},
};
constexpr StateField kShampooFields[] = {
    {ckpt::Kind::ShampooFiltered, &MemoryAccounts::momentum},
    {ckpt::Kind::ShampooGraftV, &MemoryAccounts::momentum},
    {ckpt::Kind::ShampooLeft, &MemoryAccounts::momentum, StateShape::Left},
    {ckpt::Kind::ShampooLeftRoot, &MemoryAccounts::momentum, StateShape::Left},
    {ckpt::Kind::ShampooRight, &MemoryAccounts::momentum, StateShape::Right},
    {ckpt::Kind::ShampooRightRoot, &MemoryAccounts::momentum, StateShape::Right},
};
// The arrays of both rules, by position in their fields.
enum Field { kFirst = 0, kSecond, kLeft, kLeftBasis, kRight, kRightBasis };

float *sideOf(ParamRt &p, Field f, int64_t b, int64_t d) {
  return d ? p.state[f].floats() + b * d * d : nullptr;
}

double gemmFlops(int64_t m, int64_t n, int64_t k) { return 2.0 * m * n * k; }

// The largest |m_t| / sqrt(v_t) Adam reaches after t updates of one
// coordinate: |g_{t-k}| <= sqrt(v_t / ((1 - b2) b2^k)) for each k, so
// |m_t| / sqrt(v_t) <= (1 - b1) / sqrt(1 - b2) * sum_{k<t} (b1 / sqrt(b2))^k.
double adamRatioBound(double beta1, double beta2, int64_t t) {
  const double r = beta1 / std::sqrt(beta2);
  const double terms = r == 1 ? double(t) : (1 - std::pow(r, double(t))) / (1 - r);
  return (1 - beta1) / std::sqrt(1 - beta2) * terms;
}

} // namespace

Status PreconditionedRule::reserve(const Context &ctx, const std::vector<ParamRt> &params) {
  int64_t matrix = 0, side = 0;
  for (const ParamRt &p : params)
    if (p.optimizer == this && p.stepsHere()) {
      matrix = std::max(matrix, p.localRows * p.localCols);
      side = std::max({side, p.leftDim, p.rightDim});
    }
  if (matrix == 0)
    return Status::ok();
  Device &dev = ctx.device;
  const auto floats = [](int64_t n) { return static_cast<size_t>(std::max<int64_t>(1, n)) * 4; };
  for (DeviceArray *a : {&a_, &b_, &c_, &tmp_})
    DMUON_RETURN_IF_ERROR(a->allocate(dev, floats(matrix)));
  DMUON_RETURN_IF_ERROR(square_.allocate(dev, floats(side * side)));
  DMUON_RETURN_IF_ERROR(square2_.allocate(dev, floats(side * side)));
  DMUON_RETURN_IF_ERROR(values_.allocate(dev, floats(side)));
  DMUON_RETURN_IF_ERROR(norms_.allocate(dev, 2 * sizeof(double)));
  return dev.reservePreconditioner(side);
}

Status PreconditionedRule::rotate(const Context &ctx, const Matrix &m, const float *x, float *out,
                                  bool back) {
  Device &dev = ctx.device;
  const int64_t r = m.rows, c = m.cols, n = r * c;
  const float *from = x;
  if (m.left) { // out = left^T x (into the basis) or left x (back)
    DMUON_RETURN_IF_ERROR(
        dev.gemm(!back, false, r, c, r, 1.f, m.left, from, 0.f, m.right ? tmp_.floats() : out));
    from = m.right ? tmp_.floats() : out;
    count(gemmFlops(r, c, r));
  }
  if (m.right) { // ... then times right (into) or right^T (back)
    DMUON_RETURN_IF_ERROR(dev.gemm(false, back, r, c, c, 1.f, from, m.right, 0.f, out));
    count(gemmFlops(r, c, c));
  } else if (!m.left) {
    DMUON_RETURN_IF_ERROR(dev.copy(out, x, static_cast<size_t>(n) * sizeof(float)));
  }
  return Status::ok();
}

Status PreconditionedRule::accumulateStatistics(const Context &ctx, int64_t rows, int64_t cols,
                                                const float *g, float *left, float *right,
                                                float keep) {
  const float take = static_cast<float>(1.0 - static_cast<double>(keep));
  if (left) {
    DMUON_RETURN_IF_ERROR(ctx.device.gemm(false, true, rows, rows, cols, take, g, g, keep, left));
    count(gemmFlops(rows, rows, cols));
  }
  if (right) {
    DMUON_RETURN_IF_ERROR(ctx.device.gemm(true, false, cols, cols, rows, take, g, g, keep, right));
    count(gemmFlops(cols, cols, rows));
  }
  return Status::ok();
}

// ---------------------------------------------------------------- SOAP

std::span<const StateField> Soap::fields() const { return kSoapFields; }
int64_t Soap::maxDim(const Context &ctx) const { return ctx.config.soap.maxPreconditionDim; }

// One power iteration from the current basis: P = S Q; the columns ordered
// by their estimated eigenvalues diag(Q^T S Q), largest first (and the
// second moment's rows or columns with them); Q <- the Q of P's QR.
Status Soap::refreshBasis(const Context &ctx, int64_t d, const float *statistics, float *basis,
                          float *v, int64_t rows, int64_t cols, bool columns) {
  Device &dev = ctx.device;
  float *power = square_.floats();
  DMUON_RETURN_IF_ERROR(dev.gemm(false, false, d, d, d, 1.f, statistics, basis, 0.f, power));
  count(gemmFlops(d, d, d) + 4.0 * d * d * d / 3 * 2);
  std::vector<float> q(static_cast<size_t>(d * d)), pw(static_cast<size_t>(d * d));
  DMUON_RETURN_IF_ERROR(dev.download(q.data(), basis, q.size() * sizeof(float)));
  DMUON_RETURN_IF_ERROR(dev.download(pw.data(), power, pw.size() * sizeof(float)));
  std::vector<double> estimate(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j)
      estimate[static_cast<size_t>(j)] += static_cast<double>(q[i * d + j]) * pw[i * d + j];
  std::vector<int64_t> order(static_cast<size_t>(d));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return estimate[static_cast<size_t>(a)] > estimate[static_cast<size_t>(b)];
  });
  DMUON_RETURN_IF_ERROR(dev.permute(power, d, d, order.data(), true, square2_.floats()));
  DMUON_RETURN_IF_ERROR(dev.permute(v, rows, cols, order.data(), columns, c_.floats()));
  DMUON_RETURN_IF_ERROR(dev.orthonormalize(power, d));
  return dev.copy(basis, power, static_cast<size_t>(d * d) * sizeof(float));
}

Status Soap::step(const Context &ctx, ParamRt &p, const float *grad, int64_t /*n*/,
                  int64_t stepCount) {
  const kernels::SoapHyper h = withGroupScale(ctx.config.soap, p);
  Device &dev = ctx.device;
  const int64_t rows = p.localRows, cols = p.localCols, size = rows * cols;
  // The reference's step 0 only gathers statistics; updates count from 1.
  const int64_t t = stepCount - 1;
  for (int64_t b = 0; b < p.sliceBatch; ++b) {
    const float *g = grad + b * size;
    float *w = p.master.floats() + b * size, *m = p.state[kFirst].floats() + b * size,
          *v = p.state[kSecond].floats() + b * size;
    float *left = sideOf(p, kLeft, b, p.leftDim), *right = sideOf(p, kRight, b, p.rightDim);
    float *ql = sideOf(p, kLeftBasis, b, p.leftDim), *qr = sideOf(p, kRightBasis, b, p.rightDim);
    const Matrix basis{rows, cols, ql, qr};
    if (t == 0) {
      DMUON_RETURN_IF_ERROR(accumulateStatistics(ctx, rows, cols, g, left, right, h.shampooBeta));
      for (const auto &[s, q, d] : {std::tuple{left, ql, rows}, std::tuple{right, qr, cols}})
        if (s) {
          DMUON_RETURN_IF_ERROR(dev.copy(q, s, static_cast<size_t>(d * d) * sizeof(float)));
          DMUON_RETURN_IF_ERROR(dev.symmetricEigen(q, values_.floats(), d));
          count(9.0 * d * d * d);
        }
      continue;
    }
    float *gRot = a_.floats(), *mRot = b_.floats();
    const auto take = static_cast<float>(1.0 - double(h.beta1));
    // The gradient joins the first moment in the basis too, through the same
    // rotated values the second moment squares: rotating the new moment
    // whole would round it apart from them, and after a gradient spike that
    // rounding (spike * 2^-24) dwarfs the basis' small second moments.
    DMUON_RETURN_IF_ERROR(rotate(ctx, basis, g, gRot, false));
    DMUON_RETURN_IF_ERROR(rotate(ctx, basis, m, mRot, false));
    DMUON_RETURN_IF_ERROR(dev.decayAdd(mRot, gRot, h.beta1, take, size));
    DMUON_RETURN_IF_ERROR(dev.decayAdd(m, g, h.beta1, take, size));
    // Adam's direction in the basis (overwriting the rotated gradient), held
    // to Adam's own bound: V was gathered in earlier bases, so after a
    // refresh a coordinate's two moments need not match (in exact arithmetic
    // too), and after a spike the refresh turns the basis toward it while V
    // still holds it spread over the old one (docs/optimizers.md). Then back.
    DMUON_RETURN_IF_ERROR(dev.adamDirection(gRot, mRot, v, gRot, size, h.beta2, h.eps, 1.f));
    DMUON_RETURN_IF_ERROR(dev.clampMagnitude(
        gRot, size, static_cast<float>(adamRatioBound(h.beta1, h.beta2, t))));
    DMUON_RETURN_IF_ERROR(rotate(ctx, basis, gRot, mRot, true));
    const double bc1 = 1 - std::pow(double(h.beta1), double(t)),
                 bc2 = 1 - std::pow(double(h.beta2), double(t));
    const auto stepSize = static_cast<float>(double(h.lr) * std::sqrt(bc2) / bc1);
    DMUON_RETURN_IF_ERROR(dev.scaleAdd(w, mRot, -stepSize, size));
    if (h.weightDecay != 0)
      DMUON_RETURN_IF_ERROR(dev.scaleCopy(
          w, w, static_cast<float>(1.0 - double(h.lr) * double(h.weightDecay)), size));
    DMUON_RETURN_IF_ERROR(accumulateStatistics(ctx, rows, cols, g, left, right, h.shampooBeta));
    if (t % h.preconditionFrequency == p.refreshPhase) {
      if (left)
        DMUON_RETURN_IF_ERROR(refreshBasis(ctx, rows, left, ql, v, rows, cols, false));
      if (right)
        DMUON_RETURN_IF_ERROR(refreshBasis(ctx, cols, right, qr, v, rows, cols, true));
    }
  }
  return Status::ok();
}

// ------------------------------------------------------------- Shampoo

std::span<const StateField> Shampoo::fields() const { return kShampooFields; }
int64_t Shampoo::maxDim(const Context &ctx) const { return ctx.config.shampoo.maxPreconditionDim; }

// root = (statistics * scale + eps I)^-1/4 through its eigendecomposition,
// negative eigenvalues (rounding) taken as 0.
Status Shampoo::inverseRoot(const Context &ctx, int64_t d, const float *statistics, float scale,
                            float *root) {
  Device &dev = ctx.device;
  float *q = square_.floats(), *scaled = square2_.floats();
  DMUON_RETURN_IF_ERROR(dev.scaleCopy(q, statistics, scale, d * d));
  DMUON_RETURN_IF_ERROR(dev.symmetricEigen(q, values_.floats(), d));
  std::vector<float> lambda(static_cast<size_t>(d));
  DMUON_RETURN_IF_ERROR(dev.download(lambda.data(), values_.floats(), lambda.size() * 4));
  const double eps = ctx.config.shampoo.eps;
  for (float &l : lambda)
    l = static_cast<float>(std::pow(std::max(0.0, double(l)) + eps, -0.25));
  DMUON_RETURN_IF_ERROR(dev.copy(scaled, q, static_cast<size_t>(d * d) * sizeof(float)));
  DMUON_RETURN_IF_ERROR(dev.scaleColumns(scaled, d, d, lambda.data()));
  DMUON_RETURN_IF_ERROR(dev.gemm(false, true, d, d, d, 1.f, scaled, q, 0.f, root));
  count(9.0 * d * d * d + gemmFlops(d, d, d));
  return Status::ok();
}

Status Shampoo::step(const Context &ctx, ParamRt &p, const float *grad, int64_t /*n*/,
                     int64_t stepCount) {
  const kernels::ShampooHyper h = withGroupScale(ctx.config.shampoo, p);
  Device &dev = ctx.device;
  const int64_t rows = p.localRows, cols = p.localCols, size = rows * cols;
  const int64_t t = stepCount;
  const double bc1 = 1 - std::pow(double(h.beta1), double(t)),
               bc2 = 1 - std::pow(double(h.beta2), double(t));
  const bool refresh = t % h.preconditionFrequency == p.refreshPhase,
             preconditioned = t >= h.preconditionFrequency;
  for (int64_t b = 0; b < p.sliceBatch; ++b) {
    const float *g = grad + b * size;
    float *w = p.master.floats() + b * size, *f = p.state[kFirst].floats() + b * size,
          *v = p.state[kSecond].floats() + b * size;
    float *left = sideOf(p, kLeft, b, p.leftDim), *right = sideOf(p, kRight, b, p.rightDim);
    float *rl = sideOf(p, kLeftBasis, b, p.leftDim), *rr = sideOf(p, kRightBasis, b, p.rightDim);
    DMUON_RETURN_IF_ERROR(accumulateStatistics(ctx, rows, cols, g, left, right, h.beta2));
    DMUON_RETURN_IF_ERROR(
        dev.decayAdd(f, g, h.beta1, static_cast<float>(1.0 - double(h.beta1)), size));
    float *filtered = a_.floats(), *graft = b_.floats(), *dir = c_.floats();
    DMUON_RETURN_IF_ERROR(dev.scaleCopy(filtered, f, static_cast<float>(1 / bc1), size));
    DMUON_RETURN_IF_ERROR(dev.adamDirection(graft, filtered, v, g, size, h.beta2, h.graftEps,
                                            static_cast<float>(1 / bc2)));
    float *update = graft;
    if (refresh) {
      if (left)
        DMUON_RETURN_IF_ERROR(inverseRoot(ctx, rows, left, static_cast<float>(1 / bc2), rl));
      if (right)
        DMUON_RETURN_IF_ERROR(inverseRoot(ctx, cols, right, static_cast<float>(1 / bc2), rr));
    }
    if (preconditioned && (left || right)) {
      // dir = rl F rr, through rotate's scratch use: rotate(back) computes
      // left x right^T, and both roots are symmetric.
      DMUON_RETURN_IF_ERROR(rotate(ctx, {rows, cols, rl, rr}, filtered, dir, true));
      double *norms = static_cast<double *>(static_cast<void *>(norms_.bytes()));
      DMUON_RETURN_IF_ERROR(dev.zero(norms, 2 * sizeof(double)));
      DMUON_RETURN_IF_ERROR(dev.addSumOfSquares(graft, size, norms));
      DMUON_RETURN_IF_ERROR(dev.addSumOfSquares(dir, size, norms + 1));
      double sums[2];
      DMUON_RETURN_IF_ERROR(dev.download(sums, norms, sizeof sums));
      const double scale = sums[1] > 0 ? std::sqrt(sums[0] / sums[1]) : 0.0;
      DMUON_RETURN_IF_ERROR(dev.scaleCopy(dir, dir, static_cast<float>(scale), size));
      update = dir;
    }
    if (h.weightDecay != 0)
      DMUON_RETURN_IF_ERROR(dev.scaleCopy(
          w, w, static_cast<float>(1.0 - double(h.lr) * double(h.weightDecay)), size));
    DMUON_RETURN_IF_ERROR(dev.scaleAdd(w, update, -h.lr, size));
  }
  return Status::ok();
}

} // namespace dmuon::rt
