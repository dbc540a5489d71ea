// SOAP's and Shampoo's refreshes over their period (sim/Programs.h,
// docs/optimizers.md "Staggered refreshes"): which a rank runs, what they
// cost at a step, and the step at which they cost most.
#include "sim/Programs.h"
#include "common/MatrixOptimizers.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace dmuon::sim {

int64_t RefreshPeriod::steps() const {
  return std::lcm(std::max<int64_t>(1, soap), std::max<int64_t>(1, shampoo));
}

RefreshPeriod refreshPeriod(const plan::Plan &p) {
  RefreshPeriod period;
  const plan::OptimizerDefaults *od = p.options() ? p.options()->optimizer() : nullptr;
  if (!od || !p.params())
    return period;
  for (const plan::Param *q : *p.params()) {
    if (q->role() != plan::Role::muon || q->route() != plan::Route::owner)
      continue;
    if (q->matrix_optimizer() == plan::MatrixOptimizer::soap)
      period.soap = std::max(1, od->soap_precondition_frequency());
    else if (q->matrix_optimizer() == plan::MatrixOptimizer::shampoo)
      period.shampoo = std::max(1, od->shampoo_precondition_frequency());
  }
  return period;
}

std::vector<Refresh> rankRefreshes(const plan::Plan &p, const MeshView &mesh, const Cluster &c,
                                   int64_t rank) {
  std::vector<Refresh> out;
  const plan::OptimizerDefaults *od = p.options() ? p.options()->optimizer() : nullptr;
  if (!od || !p.params())
    return out;
  const std::vector<int64_t> coord = mesh.coord(rank);
  for (const plan::Param *q : *p.params()) {
    const plan::MatrixOptimizer rule = q->matrix_optimizer();
    if (!common::preconditions(rule) || !runsNs(*q, mesh, coord))
      continue;
    const bool soap = rule == plan::MatrixOptimizer::soap;
    const int64_t f = std::max(1, soap ? od->soap_precondition_frequency()
                                       : od->shampoo_precondition_frequency());
    const int64_t rows = q->local_rows() > 0 ? q->local_rows() : q->rows();
    const int64_t cols = q->local_cols() > 0 ? q->local_cols() : q->cols();
    const double flops = common::refreshFlops(
        rule, std::max<int64_t>(1, q->local_batch()), rows, cols,
        soap ? od->soap_max_precond_dim() : od->shampoo_max_preconditioner_dim());
    if (flops <= 0)
      continue;
    const int64_t phase = soap ? q->refresh_phase() : q->refresh_phase() - 1;
    out.push_back({soap, ((phase % f) + f) % f, flops / c.device.nsFlops()});
  }
  return out;
}

double refreshSecondsAt(const std::vector<Refresh> &refreshes, const RefreshPeriod &period,
                        int64_t step) {
  double seconds = 0;
  for (const Refresh &r : refreshes)
    if (step % std::max<int64_t>(1, r.soap ? period.soap : period.shampoo) == r.stepPhase)
      seconds += r.seconds;
  return seconds;
}

double amortizedRefreshSeconds(const std::vector<Refresh> &refreshes, const RefreshPeriod &period) {
  double seconds = 0;
  for (const Refresh &r : refreshes)
    seconds += r.seconds /
               static_cast<double>(std::max<int64_t>(1, r.soap ? period.soap : period.shampoo));
  return seconds;
}

// A step s meets SOAP's phase a and Shampoo's phase b (s = a mod fs,
// s = b mod fh) if and only if a = b mod gcd(fs, fh) (the Chinese remainder
// theorem), so the worst step pairs, per residue mod the gcd, each rule's
// costliest phase; the period's length never enters, only the phases that
// hold refreshes.
std::pair<int64_t, double> worstRefreshStep(const std::vector<Refresh> &refreshes,
                                            const RefreshPeriod &period) {
  const int64_t fs = std::max<int64_t>(1, period.soap), fh = std::max<int64_t>(1, period.shampoo);
  const int64_t g = std::gcd(fs, fh);
  std::map<int64_t, double> byPhase[2]; // [shampoo]: phase -> seconds
  for (const Refresh &r : refreshes)
    byPhase[r.soap ? 0 : 1][r.stepPhase] += r.seconds;
  // [rule]: residue mod g -> (seconds, phase) of the costliest phase in it.
  std::map<int64_t, std::pair<double, int64_t>> best[2];
  for (int rule = 0; rule < 2; ++rule)
    for (const auto &[phase, seconds] : byPhase[rule]) {
      auto [it, fresh] = best[rule].try_emplace(phase % g, seconds, phase);
      if (!fresh && seconds > it->second.first)
        it->second = {seconds, phase};
    }
  int64_t step = 0;
  double worst = 0;
  std::set<int64_t> residues;
  for (int rule = 0; rule < 2; ++rule)
    for (const auto &entry : best[rule])
      residues.insert(entry.first);
  for (int64_t residue : residues) {
    int64_t phase[2] = {residue, residue}; // a rule without refreshes here: any phase of it
    double seconds = 0;
    for (int rule = 0; rule < 2; ++rule)
      if (auto it = best[rule].find(residue); it != best[rule].end()) {
        seconds += it->second.first;
        phase[rule] = it->second.second;
      }
    if (seconds <= worst)
      continue;
    worst = seconds;
    step = phase[0];
    while (step % fh != phase[1]) // at most fh / g tries
      step += fs;
  }
  return {step, worst};
}

} // namespace dmuon::sim
