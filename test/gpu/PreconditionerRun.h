// SOAP's and Shampoo's rules (runtime/optim/Preconditioned.h) run straight
// on a Device for a few steps, so that two devices' trajectories can be
// compared: what CudaPreconditionerTest.cpp runs on the CUDA and the CPU
// device, and PreconditionerRunTest.cpp checks on the CPU alone (the
// comparison tolerates what may differ between correct devices and catches
// a wrong kernel).
#ifndef DMUON_TEST_GPU_PRECONDITIONERRUN_H
#define DMUON_TEST_GPU_PRECONDITIONERRUN_H

#include "HashNoise.h"
#include "backends/loopback/LoopbackBackend.h"
#include "common/MatrixOptimizers.h"
#include "core/Context.h"
#include "optim/Preconditioned.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace dmuon::rt::precond_test {

enum class Rule { Soap, Shampoo };
inline const char *ruleName(Rule r) { return r == Rule::Soap ? "SOAP" : "Shampoo"; }

// A matrix of the run and the step its refreshes fall on (mod frequency).
struct MatrixCase {
  int64_t rows, cols;
  int refreshPhase;
};
// Both sides preconditioned, and a wide and a tall matrix whose long side
// is over the cap (one-sided), refreshing at other phases. SOAP's first
// basis comes from one gradient's statistics: every kept side is a matrix's
// short side (or a square's), so that those are full rank. (A long side's
// G G^T has a null space whose basis is arbitrary, and Adam in the rotated
// basis is not invariant to it: two correct devices differ there by O(1),
// as PreconditionerRunTest.cpp saw with rounding-level noise.)
constexpr int64_t kCap = 32;
constexpr int kFrequency = 3;
constexpr int kSteps = 12; // SOAP refreshes 4 times, Shampoo takes 4 roots
inline const std::vector<MatrixCase> kCases = {{20, 20, 0}, {20, 40, 1}, {40, 24, 2}};

// Relative difference of two devices' parameter updates after kSteps that
// the comparison tolerates (fp32 GEMMs in another order and another
// eigensolver; PreconditionerRunTest.cpp measures what rounding-level
// noise and eigenvector signs cause, and what a wrong kernel does).
constexpr double kStepTolerance = 1e-3;

// A deterministic value in [-1, 1) per (matrix, step, element): full-rank
// gradients, as a low-rank statistic leaves SOAP's basis arbitrary inside
// its null space.
inline float valueAt(int matrix, int step, int64_t i) {
  return dmuon::testhash::hashNoise(matrix, step + 11, i);
}

// Any plan: the rules read none of it, but a Context refers to one. The
// tiny model's (DMUON_TINY_PLAN_DIR in the environment, else the build's).
inline const LoadedPlan *anyPlan(std::string &error) {
  static std::unique_ptr<LoadedPlan> plan;
  if (plan)
    return plan.get();
  const char *env = std::getenv("DMUON_TINY_PLAN_DIR");
  const std::string path = std::string(env && *env ? env : DMUON_TINY_PLAN_DIR) + "/tiny-1.plan";
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  Status s = LoadedPlan::create(std::move(bytes), plan);
  if (!s.isOk())
    error = path + ": " + s.message();
  return plan.get();
}

// Every matrix's values before and after the run, on the host.
struct Trajectory {
  std::vector<std::vector<float>> initial, final;
};

// kSteps of `rule` on `dev` over kCases, from the same values and
// gradients on every device.
inline Status runRule(Device &dev, Rule rule, Trajectory &out) {
  std::string planError;
  const LoadedPlan *plan = anyPlan(planError);
  if (!plan)
    return invalidArgument(planError);
  std::unique_ptr<Backend> backend;
  DMUON_RETURN_IF_ERROR(createLoopbackBackend(createLoopbackFabric(1), 0, backend));
  Topology topo;
  Config config;
  config.soap.preconditionFrequency = config.shampoo.preconditionFrequency = kFrequency;
  config.soap.maxPreconditionDim = config.shampoo.maxPreconditionDim = kCap;
  CommCounters counters;
  MemoryAccounts memory;
  const Context ctx{*plan, topo, config, dev, *backend, counters, memory};

  Soap soap;
  Shampoo shampoo;
  PreconditionedRule &r = rule == Rule::Soap ? static_cast<PreconditionedRule &>(soap) : shampoo;
  std::vector<ParamRt> params(kCases.size());
  std::vector<DeviceArray> grads(kCases.size());
  out = {};
  for (size_t i = 0; i < kCases.size(); ++i) {
    const MatrixCase &c = kCases[i];
    ParamRt &p = params[i];
    p.name = "m" + std::to_string(i);
    p.muon = true;
    p.route = plan::Route::owner;
    p.owner.isOwner = p.owner.keepsMaster = true;
    p.optimizer = &r;
    p.numel = p.sliceNumel = c.rows * c.cols;
    p.localRows = c.rows;
    p.localCols = c.cols;
    p.leftDim = common::preconditionsSide(c.rows, kCap) ? c.rows : 0;
    p.rightDim = common::preconditionsSide(c.cols, kCap) ? c.cols : 0;
    p.refreshPhase = c.refreshPhase;
    std::vector<float> w(static_cast<size_t>(p.numel));
    for (size_t k = 0; k < w.size(); ++k)
      w[k] = valueAt(static_cast<int>(i), -1, static_cast<int64_t>(k));
    DMUON_RETURN_IF_ERROR(p.master.allocate(dev, w.size() * sizeof(float)));
    DMUON_RETURN_IF_ERROR(dev.upload(p.master.floats(), w.data(), w.size() * sizeof(float)));
    out.initial.push_back(std::move(w));
    const auto fields = r.fields();
    p.state.resize(fields.size());
    for (size_t f = 0; f < fields.size(); ++f)
      DMUON_RETURN_IF_ERROR(p.state[f].allocate(
          dev, static_cast<size_t>(stateElements(p, fields[f])) * sizeof(float)));
    DMUON_RETURN_IF_ERROR(grads[i].allocate(dev, static_cast<size_t>(p.numel) * sizeof(float)));
  }
  DMUON_RETURN_IF_ERROR(r.reserve(ctx, params));
  for (int step = 1; step <= kSteps; ++step)
    for (size_t i = 0; i < params.size(); ++i) {
      ParamRt &p = params[i];
      std::vector<float> g(static_cast<size_t>(p.numel));
      for (size_t k = 0; k < g.size(); ++k)
        g[k] = valueAt(static_cast<int>(i), step, static_cast<int64_t>(k));
      DMUON_RETURN_IF_ERROR(dev.upload(grads[i].floats(), g.data(), g.size() * sizeof(float)));
      DMUON_RETURN_IF_ERROR(r.step(ctx, p, grads[i].floats(), p.numel, step));
    }
  DMUON_RETURN_IF_ERROR(dev.synchronize());
  for (ParamRt &p : params) {
    std::vector<float> w(static_cast<size_t>(p.numel));
    DMUON_RETURN_IF_ERROR(dev.download(w.data(), p.master.floats(), w.size() * sizeof(float)));
    out.final.push_back(std::move(w));
  }
  return Status::ok();
}

// The largest over the matrices of |got - want| / |want's update| (Frobenius).
inline double updateError(const Trajectory &got, const Trajectory &want) {
  double worst = 0;
  for (size_t i = 0; i < want.final.size(); ++i) {
    double diff = 0, update = 0;
    for (size_t k = 0; k < want.final[i].size(); ++k) {
      const double d = double(got.final[i][k]) - want.final[i][k];
      const double u = double(want.final[i][k]) - want.initial[i][k];
      diff += d * d;
      update += u * u;
    }
    worst = std::max(worst, update > 0 ? std::sqrt(diff / update) : INFINITY);
  }
  return worst;
}

} // namespace dmuon::rt::precond_test

#endif
