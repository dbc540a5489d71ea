// The training-loop calls of libdmuon on the tiny model, under mpirun, each
// against a single-process Muon + AdamW reference on the same global batch:
//   accumulation  k = 4 micro-batches equal one batch of 4b (local and
//                 reduce modes); local moves k times fewer reduce bytes;
//                 counters equal the plan's figures scaled by k
//   schedule      warmup + cosine through set_hyper_params, and the global
//                 gradient norm of every step, equal the reference's
//   clipping      `all` clips to the max norm; `adamw_only` leaves Muon's
//                 update its normal size where `all` shrinks it
//   non-finite    a NaN or Inf in one rank's gradient skips the step on every
//                 rank, changes nothing, and training goes on
//   agreement     ranks passing different hyper-parameters all refuse them
//
//   mpirun -n N dmuon-train-loop-test --plan tiny-<mesh>.plan
#include "MpiCheck.h"
#include "TinyRuntime.h"

#include "kernels/cpu/MuonKernels.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using mpicheck::fail;
using mpicheck::gRank;
using mpicheck::gWorld;
using mpicheck::info;
namespace k = dmuon::kernels;
using Params = std::map<std::string, std::vector<float>>;

constexpr uint64_t kSeed = 11;
constexpr double kLr = 0.02, kMomentum = 0.95, kWd = 0.01, kAdamwLr = 0.01, kAdamwWd = 0.01;

struct Scenario {
  explicit Scenario(std::string l = {}) : label(std::move(l)) {}
  std::string label;
  int steps = 10;
  int microBatches = 1;
  dmuon_accumulation_t accumulation = DMUON_ACCUMULATION_LOCAL;
  bool schedule = false;
  double maxGradNorm = 0;
  dmuon_clip_policy_t clip = DMUON_CLIP_ADAMW_ONLY;
  // step -> param whose gradient gets a non-finite element on the last rank
  std::map<int, std::string> poison;
  std::set<int> skipData; // data indices a run leaves out
};

// Linear warmup over 3 steps, then cosine down to 10% at the last step.
double lrFactor(int step, int steps) {
  if (step < 3)
    return (step + 1) / 3.0;
  const double t = static_cast<double>(step - 3) / std::max(1, steps - 4);
  return 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * t));
}

struct Outcome {
  Params final;
  std::vector<double> norms, muonNorms, adamwNorms, coefs;
  std::vector<int> skipped;
  uint64_t reduceBytes = 0; // sent + received, all steps
};

// The data index of each step a run trains on.
std::vector<int> dataIndices(const Scenario &sc) {
  std::vector<int> out;
  for (int i = 0; static_cast<int>(out.size()) < sc.steps; ++i)
    if (!sc.skipData.count(i))
      out.push_back(i);
  return out;
}

float poisonValue(int step) {
  return step % 2 ? std::numeric_limits<float>::infinity()
                  : std::numeric_limits<float>::quiet_NaN();
}

// ------------------------------------------------------------- reference

Outcome runReference(const dmuon::Plan &plan, const tiny::Config &cfg, const Scenario &sc) {
  tiny::ParamStore store(cfg, kSeed);
  tiny::Data data(cfg, kSeed);
  tiny::Model model(cfg, cfg.globalBatch);
  std::vector<float> x(static_cast<size_t>(cfg.globalBatch * cfg.inDim));
  std::vector<float> t(static_cast<size_t>(cfg.globalBatch * cfg.outDim));
  struct State {
    dmuon_param_info_t info;
    std::vector<float> m, v;
  };
  std::vector<State> states;
  for (int i = 0; i < plan.numParams(); ++i) {
    State s{plan.param(i), {}, {}};
    s.m.assign(static_cast<size_t>(s.info.numel), 0.0f);
    s.v.assign(static_cast<size_t>(s.info.numel), 0.0f);
    states.push_back(std::move(s));
  }
  Outcome out;
  k::NsWorkspace ws;
  int64_t adamwSteps = 0;
  const std::vector<int> indices = dataIndices(sc);
  for (int step = 0; step < sc.steps; ++step) {
    data.batch(indices[static_cast<size_t>(step)], 0, cfg.globalBatch, x.data(), t.data());
    store.zeroGrads();
    model.forwardBackward(store, x.data(), t.data());
    if (auto it = sc.poison.find(step); it != sc.poison.end())
      store.grads(it->second)[0] = poisonValue(step);
    double muonSq = 0, adamwSq = 0;
    for (const State &s : states)
      for (float g : store.grads(s.info.name))
        (s.info.role == DMUON_ROLE_MUON ? muonSq : adamwSq) += static_cast<double>(g) * g;
    const double total = std::sqrt(muonSq + adamwSq);
    out.norms.push_back(total);
    out.muonNorms.push_back(std::sqrt(muonSq));
    out.adamwNorms.push_back(std::sqrt(adamwSq));
    if (!std::isfinite(muonSq + adamwSq)) {
      out.skipped.push_back(1);
      out.coefs.push_back(1);
      continue;
    }
    out.skipped.push_back(0);
    double coef = 1;
    if (sc.maxGradNorm > 0 && sc.clip != DMUON_CLIP_NONE)
      coef = std::min(1.0, sc.maxGradNorm / ((sc.clip == DMUON_CLIP_ALL ? total
                                                                          : std::sqrt(adamwSq)) +
                                              1e-6));
    out.coefs.push_back(coef);
    const double f = sc.schedule ? lrFactor(step, sc.steps) : 1.0;
    k::MuonHyper mh;
    mh.lr = static_cast<float>(kLr * f);
    mh.momentum = static_cast<float>(kMomentum);
    mh.weightDecay = static_cast<float>(kWd);
    k::AdamWHyper ah;
    ah.lr = static_cast<float>(kAdamwLr * f);
    ah.weightDecay = static_cast<float>(kAdamwWd);
    ++adamwSteps;
    for (State &s : states) {
      std::vector<float> &p = store.values(s.info.name);
      std::vector<float> &g = store.grads(s.info.name);
      const bool muon = s.info.role == DMUON_ROLE_MUON;
      if (coef < 1 && (!muon || sc.clip == DMUON_CLIP_ALL))
        for (float &v : g)
          v *= static_cast<float>(coef);
      if (muon)
        k::muonStep(p.data(), s.m.data(), g.data(), 1, s.info.shape[0], s.info.shape[1], mh, ws);
      else
        k::adamwStep(p.data(), s.m.data(), s.v.data(), g.data(), s.info.numel, adamwSteps, ah);
    }
  }
  for (const tiny::ParamSpec &s : store.specs())
    out.final[s.name] = store.values(s.name);
  return out;
}

// ----------------------------------------------------------- distributed

// Puts a non-finite value into a Muon param's gradient while its layer's
// buffer is live (between pre_backward and post_backward).
class PoisoningAccess : public tiny::RuntimeAccess {
public:
  PoisoningAccess(dmuon::Runtime &rt, const tiny::PlanBinding &binding)
      : RuntimeAccess(rt, binding), rt_(rt), binding_(binding) {}
  std::string target;
  float value = 0;
  void afterLayerBackward(int l) override {
    if (!target.empty() && target.rfind("layers." + std::to_string(l) + ".", 0) == 0) {
      rt_.gradView(binding_.paramIndex(target))[0] = value;
      target.clear();
    }
    RuntimeAccess::afterLayerBackward(l);
  }

private:
  dmuon::Runtime &rt_;
  const tiny::PlanBinding &binding_;
};

dmuon_runtime_options_t makeOptions(MPI_Comm *comm, const Scenario &sc) {
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.communicator = comm;
  o.lr = kLr;
  o.momentum = kMomentum;
  o.weight_decay = kWd;
  o.nesterov = 1;
  o.ns_steps = 5;
  o.adamw_lr = kAdamwLr;
  o.adamw_weight_decay = kAdamwWd;
  o.accumulation = sc.accumulation;
  o.max_grad_norm = sc.maxGradNorm;
  o.clip_policy = sc.clip;
  return o;
}

class Distributed {
public:
  Distributed(const dmuon::Plan &plan, const tiny::Config &cfg)
      : plan_(plan), cfg_(cfg), binding_(plan, cfg) {}

  Outcome run(const Scenario &sc) {
    MPI_Comm comm = MPI_COMM_WORLD;
    dmuon_runtime_options_t opt = makeOptions(&comm, sc);
    dmuon::Runtime rt(plan_, opt);
    tiny::bindInitialParams(rt, cfg_, kSeed);
    const int64_t local = cfg_.globalBatch / gWorld, micro = local / sc.microBatches;
    tiny::Data data(cfg_, kSeed);
    tiny::Model model(cfg_, micro);
    PoisoningAccess access(rt, binding_);
    std::vector<float> x(static_cast<size_t>(micro * cfg_.inDim));
    std::vector<float> t(static_cast<size_t>(micro * cfg_.outDim));
    const std::vector<int> indices = dataIndices(sc);
    Outcome out;
    for (int step = 0; step < sc.steps; ++step) {
      if (sc.schedule) {
        dmuon_hyper_params_t h;
        dmuon_hyper_params_init(&h);
        h.lr = kLr * lrFactor(step, sc.steps);
        h.adamw_lr = kAdamwLr * lrFactor(step, sc.steps);
        rt.setHyperParams(h);
      }
      rt.resetCommCounters();
      auto poison = sc.poison.find(step);
      const bool poisonHere = poison != sc.poison.end() && gRank == gWorld - 1;
      for (int i = 0; i < sc.microBatches; ++i) {
        if (sc.microBatches > 1)
          rt.beginMicroBatch(i == sc.microBatches - 1);
        data.batch(indices[static_cast<size_t>(step)], gRank * local + i * micro, micro, x.data(),
                   t.data());
        // A param the hooks move takes its gradient only inside its window.
        if (poisonHere && i == 0 && poison->second.rfind("layers.", 0) == 0 &&
            plan_.param(plan_.findParam(poison->second)).hook_group >= 0) {
          access.target = poison->second;
          access.value = poisonValue(step);
        }
        model.forwardBackward(access, x.data(), t.data(), sc.microBatches);
      }
      if (poisonHere && plan_.param(plan_.findParam(poison->second)).hook_group < 0)
        rt.gradView(plan_.findParam(poison->second))[0] = poisonValue(step);
      const bool applied = rt.step();
      out.skipped.push_back(!applied);
      const dmuon_grad_norm_t n = rt.gradNorm();
      out.norms.push_back(n.total);
      out.muonNorms.push_back(n.muon);
      out.adamwNorms.push_back(n.adamw);
      out.coefs.push_back(n.clip_coef);
      rt.synchronize();
      const dmuon_comm_counters_t got = rt.commCounters(), want = rt.plannedCounters();
      out.reduceBytes += got.kinds[DMUON_COLLECTIVE_REDUCE].sent + got.kinds[DMUON_COLLECTIVE_REDUCE].received;
      for (int kind = 0; applied && kind < DMUON_COLLECTIVE_COUNT; ++kind)
        if (got.kinds[kind].sent != want.kinds[kind].sent || got.kinds[kind].received != want.kinds[kind].received)
          fail("[%s] step %d: collective kind %d moved %llu/%llu bytes, the plan says %llu/%llu",
               sc.label.c_str(), step, kind, static_cast<unsigned long long>(got.kinds[kind].sent),
               static_cast<unsigned long long>(got.kinds[kind].received),
               static_cast<unsigned long long>(want.kinds[kind].sent),
               static_cast<unsigned long long>(want.kinds[kind].received));
    }
    const auto [applied, skipped] = rt.stepCounts();
    const int64_t wantSkipped = std::count(out.skipped.begin(), out.skipped.end(), 1);
    if (applied != sc.steps - wantSkipped || skipped != wantSkipped)
      fail("[%s] step counts %lld applied, %lld skipped; expected %lld and %lld",
           sc.label.c_str(), static_cast<long long>(applied), static_cast<long long>(skipped),
           static_cast<long long>(sc.steps - wantSkipped), static_cast<long long>(wantSkipped));
    for (int i = 0; i < plan_.numParams(); ++i) {
      const dmuon_param_info_t p = plan_.param(i);
      std::vector<float> v(static_cast<size_t>(p.numel));
      rt.gatherParam(p.name, v.data(), p.numel);
      out.final[p.name] = std::move(v);
    }
    return out;
  }

private:
  const dmuon::Plan &plan_;
  tiny::Config cfg_;
  tiny::PlanBinding binding_;
};

// ---------------------------------------------------------------- checks

// Worst over params of max|a - b| / max|b|.
double worstRelative(const Params &a, const Params &b, std::string *where = nullptr) {
  double worst = 0;
  for (const auto &[name, vb] : b) {
    const std::vector<float> &va = a.at(name);
    double diff = 0, scale = 0;
    for (size_t i = 0; i < vb.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(va[i]) - vb[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(vb[i])));
    }
    const double rel = diff / std::max(scale, 1e-30);
    if (rel > worst && where)
      *where = name;
    worst = std::max(worst, rel);
  }
  return worst;
}

void expectClose(const char *what, const Params &got, const Params &want, double tol) {
  std::string where;
  const double rel = worstRelative(got, want, &where);
  if (rel > tol)
    fail("%s: worst param relative error %.3g (%s) over the tolerance %g", what, rel,
         where.c_str(), tol);
  else
    info("%s: worst param relative error %.3g (%s), tolerance %g", what, rel, where.c_str(), tol);
}

void expectNormsClose(const char *what, const Outcome &got, const Outcome &want, double tol) {
  for (size_t s = 0; s < want.norms.size(); ++s) {
    const double pairs[][2] = {{got.norms[s], want.norms[s]},
                               {got.muonNorms[s], want.muonNorms[s]},
                               {got.adamwNorms[s], want.adamwNorms[s]},
                               {got.coefs[s], want.coefs[s]}};
    for (const auto &pr : pairs)
      if (std::isfinite(pr[1]) && std::fabs(pr[0] - pr[1]) > tol * std::fabs(pr[1]))
        fail("%s: step %zu: norm/coefficient %.9g, reference %.9g", what, s, pr[0], pr[1]);
  }
  info("%s: total grad norm step 0 %.6f (reference %.6f), step %zu %.6f", what, got.norms[0],
       want.norms[0], want.norms.size() - 1, got.norms.back());
}

void checkAccumulation(Distributed &dist, const std::string &mesh) {
  Scenario one("[" + mesh + "] one batch");
  const Outcome single = dist.run(one);
  uint64_t localBytes = 0, reduceBytes = 0;
  for (dmuon_accumulation_t mode : {DMUON_ACCUMULATION_LOCAL, DMUON_ACCUMULATION_REDUCE}) {
    Scenario sc;
    sc.label = "[" + mesh + "] 4 micro-batches, " +
               (mode == DMUON_ACCUMULATION_LOCAL ? "local" : "reduce");
    sc.microBatches = 4;
    sc.accumulation = mode;
    const Outcome acc = dist.run(sc);
    // The accumulated gradient itself agrees to fp32 rounding; Newton-Schulz
    // amplifies those last-bit differences in the params (7.6e-7 after one
    // step, 2.5e-6 after ten on the tiny model), hence two tolerances.
    expectNormsClose((sc.label + " grad norms").c_str(), acc, single, 1e-6);
    expectClose((sc.label + " vs one batch of 4b").c_str(), acc.final, single.final, 5e-6);
    (mode == DMUON_ACCUMULATION_LOCAL ? localBytes : reduceBytes) = acc.reduceBytes;
  }
  if (gWorld > 1 && reduceBytes != 4 * localBytes)
    fail("[%s] reduce mode moved %llu reduce bytes, local mode %llu: not 4x", mesh.c_str(),
         static_cast<unsigned long long>(reduceBytes),
         static_cast<unsigned long long>(localBytes));
  else
    info("[%s] reduce bytes over 10 steps: local %llu, reduce %llu", mesh.c_str(),
         static_cast<unsigned long long>(localBytes), static_cast<unsigned long long>(reduceBytes));
}

void checkSchedule(Distributed &dist, const dmuon::Plan &plan, const tiny::Config &cfg,
                   const std::string &mesh) {
  Scenario sc("[" + mesh + "] warmup+cosine, clip all");
  sc.steps = 20;
  sc.schedule = true;
  sc.maxGradNorm = 0.05; // below the early norms: some steps clip
  sc.clip = DMUON_CLIP_ALL;
  const Outcome got = dist.run(sc), want = runReference(plan, cfg, sc);
  expectClose((sc.label + " vs single process").c_str(), got.final, want.final, 1e-4);
  expectNormsClose(sc.label.c_str(), got, want, 1e-6);
  int clipped = 0;
  for (size_t s = 0; s < got.norms.size(); ++s)
    if (got.coefs[s] < 1) {
      ++clipped;
      const double after = got.coefs[s] * got.norms[s];
      if (std::fabs(after - sc.maxGradNorm) > 1e-5 * sc.maxGradNorm)
        fail("%s: step %zu: norm after clipping %.9g, not the max norm %g", sc.label.c_str(), s,
             after, sc.maxGradNorm);
    }
  if (clipped == 0)
    fail("%s: no step clipped; the test wants some", sc.label.c_str());
}

// A global clip factor of ~1e-6 takes Muon's input toward NS's 1e-7
// epsilon (the update shrinks, and stalls for smaller factors); adamw_only
// leaves Muon's update exactly as without clipping.
void checkClipPolicies(Distributed &dist, const std::string &mesh) {
  Scenario plain("[" + mesh + "] no clipping");
  plain.steps = 1;
  const Outcome base = dist.run(plain);
  Scenario tiny = plain;
  tiny.maxGradNorm = base.norms[0] * 1e-6;
  tiny.label = "[" + mesh + "] adamw_only at 1e-6";
  tiny.clip = DMUON_CLIP_ADAMW_ONLY;
  const Outcome adamwOnly = dist.run(tiny);
  tiny.label = "[" + mesh + "] all at 1e-6";
  tiny.clip = DMUON_CLIP_ALL;
  const Outcome all = dist.run(tiny);
  tiny::ParamStore init(tiny::Config{}, kSeed);
  double normal = 0, withAdamwOnly = 0, withAll = 0;
  for (const auto &[name, v] : base.final) {
    if (name.find(".fc") == std::string::npos || name.find(".weight") == std::string::npos)
      continue; // Muon params
    const std::vector<float> &p0 = init.values(name);
    for (size_t i = 0; i < v.size(); ++i) {
      normal += std::pow(static_cast<double>(v[i]) - p0[i], 2);
      withAdamwOnly += std::pow(static_cast<double>(adamwOnly.final.at(name)[i]) - p0[i], 2);
      withAll += std::pow(static_cast<double>(all.final.at(name)[i]) - p0[i], 2);
    }
  }
  normal = std::sqrt(normal), withAdamwOnly = std::sqrt(withAdamwOnly), withAll = std::sqrt(withAll);
  if (withAdamwOnly != normal)
    fail("[%s] adamw_only clipping changed the Muon update: |dW| %.9g vs %.9g unclipped",
         mesh.c_str(), withAdamwOnly, normal);
  if (!(withAll < normal))
    fail("[%s] clipping all by 1e-6 did not reach the Muon update (%.9g vs %.9g)", mesh.c_str(),
         withAll, normal);
  info("[%s] Muon update size after a 1e-6 clip: adamw_only %.6g, all %.6g (unclipped %.6g)",
       mesh.c_str(), withAdamwOnly, withAll, normal);
}

void checkNonFinite(Distributed &dist, const dmuon::Plan &plan, const tiny::Config &cfg,
                    const std::string &mesh) {
  Scenario bad("[" + mesh + "] NaN/Inf injected");
  bad.poison = {{3, "layers.1.fc1.weight"}, {6, "layers.2.norm.weight"}};
  const Outcome got = dist.run(bad);
  for (int s : {3, 6})
    if (!got.skipped[static_cast<size_t>(s)] || std::isfinite(got.norms[static_cast<size_t>(s)]))
      fail("%s: step %d was not skipped (norm %g)", bad.label.c_str(), s,
           got.norms[static_cast<size_t>(s)]);
  // A skipped step changes nothing: training on the other batches gives
  // exactly what training without the bad ones gives.
  Scenario clean("[" + mesh + "] without the bad batches");
  clean.steps = bad.steps - 2;
  clean.skipData = {3, 6};
  const Outcome ref = dist.run(clean);
  if (worstRelative(got.final, ref.final) != 0)
    fail("%s: params differ from a run without the bad batches: a skipped step changed state",
         bad.label.c_str());
  else
    info("%s: steps 3 and 6 skipped on every rank; final params bit-identical to a run without "
         "those batches",
         bad.label.c_str());
  expectClose((bad.label + " vs single process").c_str(), got.final,
              runReference(plan, cfg, bad).final, 1e-4);
}

// Ranks that pass different values all refuse them and keep theirs.
void checkAgreement(const dmuon::Plan &plan) {
  MPI_Comm comm = MPI_COMM_WORLD;
  Scenario sc;
  dmuon_runtime_options_t opt = makeOptions(&comm, sc);
  dmuon::Runtime rt(plan, opt);
  dmuon_hyper_params_t h;
  dmuon_hyper_params_init(&h);
  h.lr = gRank == gWorld - 1 ? 0.5 : 0.1;
  const dmuon_status_t st = dmuon_runtime_set_hyper_params(rt.get(), &h);
  const std::string msg = dmuon_runtime_last_error(rt.get());
  if (st != DMUON_ERROR_MISMATCH || msg.find("rank " + std::to_string(gWorld - 1)) == std::string::npos)
    fail("mismatched lr: status %d, message '%s'", st, msg.c_str());
  if (rt.hyperParams().lr != static_cast<float>(kLr))
    fail("mismatched lr: the refused value was applied (lr %g)", rt.hyperParams().lr);
  h.lr = -1;
  if (dmuon_runtime_set_hyper_params(rt.get(), &h) != DMUON_ERROR_INVALID_ARGUMENT)
    fail("a negative lr was not refused");
  info("mismatched hyper-parameters refused on every rank: %s", msg.c_str());
}

// A checkpoint holds the schedule's current values and the step counts.
void checkCheckpointKeepsSchedule(const dmuon::Plan &plan, const tiny::Config &cfg) {
  char dir[] = "/tmp/dmuon-train-loop-XXXXXX";
  int made = gRank == 0 && ::mkdtemp(dir) ? 1 : 0;
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(&made, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!made) {
    fail("cannot make a temporary directory");
    return;
  }
  MPI_Comm comm = MPI_COMM_WORLD;
  Scenario sc;
  sc.steps = 2;
  dmuon_runtime_options_t opt = makeOptions(&comm, sc);
  dmuon_hyper_params_t set;
  dmuon_hyper_params_init(&set);
  set.lr = 0.0123, set.momentum = 0.9, set.weight_decay = 0.2, set.adamw_lr = 3e-4;
  set.adamw_weight_decay = 0.05;
  {
    dmuon::Runtime rt(plan, opt);
    tiny::bindInitialParams(rt, cfg, kSeed);
    rt.setHyperParams(set);
    rt.saveCheckpoint(dir, 7);
  }
  dmuon::Runtime fresh(plan, opt);
  fresh.loadCheckpoint(dir);
  const dmuon_hyper_params_t got = fresh.hyperParams();
  const double pairs[][2] = {{got.lr, set.lr},
                             {got.momentum, set.momentum},
                             {got.weight_decay, set.weight_decay},
                             {got.adamw_lr, set.adamw_lr},
                             {got.adamw_weight_decay, set.adamw_weight_decay}};
  for (const auto &pr : pairs)
    if (pr[0] != static_cast<float>(pr[1]))
      fail("checkpoint: hyper-parameter %.9g came back as %.9g", pr[1], pr[0]);
  MPI_Barrier(MPI_COMM_WORLD);
  if (gRank == 0)
    std::system(("rm -rf '" + std::string(dir) + "'").c_str());
  info("checkpoint restores the schedule's hyper-parameters");
}

int runTests(int argc, char **argv) {
  const std::string planPath =
      mpicheck::planArgument(argc, argv, "dmuon-train-loop-test --plan tiny-<mesh>.plan");
  if (planPath.empty())
    return 2;
  dmuon::Plan plan(planPath);
  const tiny::Config cfg;
  const std::string mesh = planPath.substr(planPath.find_last_of('/') + 1);
  Distributed dist(plan, cfg);
  checkAccumulation(dist, mesh);
  checkSchedule(dist, plan, cfg, mesh);
  checkClipPolicies(dist, mesh);
  checkNonFinite(dist, plan, cfg, mesh);
  if (gWorld > 1)
    checkAgreement(plan);
  checkCheckpointKeepsSchedule(plan, cfg);
  return 0;
}

} // namespace

int main(int argc, char **argv) { return mpicheck::runMain(argc, argv, runTests); }
