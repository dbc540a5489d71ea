// Distributed tests of libdmuon on the MPI backend, run under mpirun by ctest
// (1, 3 and 4 ranks 1-D, HSDP 2x2 and 2x4), for plans that route the AdamW
// params every way the compiler can (owner, sharded, replicated, host, and
// all four in one model).
//
// Over 10-step runs of the tiny model (hosts/tiny/TinyModel.h):
//   * I1-I4 (docs/runtime.md#invariants) on every rank after every step, from
//     dmuon_runtime_param_state and the plan's owner info;
//   * equivalence with a single-process Muon+AdamW reference on the full
//     global batch (the kernels of kernels/cpu): identical params and loss at
//     step 0, every param within 1e-4 relative error after 10 steps; params
//     on the host route are kept and stepped here, as a DDP host would;
//   * sync vs async replicate broadcast and Z2 vs Z3: bit-identical losses and
//     params;
//   * per step, the bytes each rank sent and received per collective kind
//     equal dmuon_runtime_planned_counters;
//   * a plan with Partial placements is refused with
//     DMUON_ERROR_UNSUPPORTED ("not supported yet"), a plan for another world
//     size with DMUON_ERROR_MISMATCH.
//
// usage: mpirun -n N dmuon-mpi-test --plan P --mesh M [--mp-plan P] [--other-world-plan P]
// Exits 0 when every check passed on every rank; failures are printed as
// "rank R: FAIL: ..." lines.
#include "TinyRuns.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

// ------------------------------------------------------------ comparisons
using mpicheck::bits;

void expectIdentical(const char *what, const Trajectory &a, const Trajectory &b,
                     const std::string &mesh) {
  const int before = gFailures;
  int bad = 0;
  for (size_t i = 0; i < a.losses.size() && i < b.losses.size(); ++i)
    if (bits(a.losses[i]) != bits(b.losses[i])) {
      if (bad++ < 3)
        fail("[%s] %s: loss at step %zu differs: %.9g vs %.9g", mesh.c_str(), what, i,
             static_cast<double>(a.losses[i]), static_cast<double>(b.losses[i]));
    }
  for (const auto &[name, va] : a.final) {
    const std::vector<float> &vb = b.final.at(name);
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < va.size(); ++i)
      if (bits(va[i]) != bits(vb[i]) && diff++ == 0)
        first = i;
    if (diff)
      fail("[%s] %s: %s differs in %zu of %zu elements after %d steps (first [%zu]: %.9g vs "
           "%.9g)",
           mesh.c_str(), what, name.c_str(), diff, va.size(), kSteps, first,
           static_cast<double>(va[first]), static_cast<double>(vb[first]));
  }
  if (gFailures == before)
    info("[%s] %s: bit-identical losses and params over %d steps", mesh.c_str(), what, kSteps);
}

void compareWithReference(const Trajectory &dist, const Trajectory &ref, const std::string &mesh) {
  // Step 0: the same params and the same loss.
  for (const auto &[name, v] : ref.initial)
    if (dist.initial.at(name) != v)
      fail("[%s] %s: gathered right after binding, differs from its initial values", mesh.c_str(),
           name.c_str());
  const double l0 = dist.losses[0], r0 = ref.losses[0];
  const double lossErr = std::fabs(l0 - r0) / std::max(1e-30, std::fabs(r0));
  if (lossErr > 1e-6)
    fail("[%s] loss at step 0: distributed %.9g, reference %.9g (relative error %.3g)", mesh.c_str(),
         l0, r0, lossErr);

  const auto [worst, worstName] =
      worstParamDiff(dist.final, ref.final, [&](const std::string &name, const ParamDiff &d) {
        if (d.rel > kRelTol)
          fail("[%s] %s after %d steps: relative error %.3g vs the single-process reference "
               "(max abs diff %.3g, max abs value %.3g; tolerance %g)",
               mesh.c_str(), name.c_str(), kSteps, d.rel, d.maxDiff, d.maxAbs, kRelTol);
      });
  info("[%s] vs single-process reference: loss step 0 %.6f (ref %.6f), step %d %.6f (ref %.6f); "
       "worst param relative error %.3g (%s)",
       mesh.c_str(), l0, r0, kSteps - 1, static_cast<double>(dist.losses.back()),
       static_cast<double>(ref.losses.back()), worst, worstName.c_str());
}

// ------------------------------------------------------------- refusals
void expectRefused(const std::string &path, dmuon_status_t want, const char *mustContain,
                   const char *what) {
  dmuon_plan_t plan = nullptr;
  dmuon_status_t st = dmuon_plan_load_file(path.c_str(), &plan);
  if (st != DMUON_SUCCESS) {
    fail("%s: the plan '%s' does not even load: %s", what, path.c_str(), dmuon_last_error());
    return;
  }
  MPI_Comm comm = MPI_COMM_WORLD;
  dmuon_runtime_options_t opt = makeOptions(&comm, DMUON_MODE_FROM_PLAN, -1);
  dmuon_runtime_t rt = nullptr;
  st = dmuon_runtime_create(plan, &opt, &rt);
  const std::string msg = dmuon_last_error();
  if (st == DMUON_SUCCESS) {
    fail("%s: dmuon_runtime_create accepted '%s'", what, path.c_str());
    dmuon_runtime_destroy(rt);
  } else {
    if (st != want)
      fail("%s: dmuon_runtime_create returned %s, expected %s (message: %s)", what,
           dmuon_status_string(st), dmuon_status_string(want), msg.c_str());
    if (rt != nullptr)
      fail("%s: a failed dmuon_runtime_create left a runtime handle", what);
    if (msg.empty())
      fail("%s: no error message", what);
    if (mustContain && msg.find(mustContain) == std::string::npos)
      fail("%s: the message '%s' does not contain '%s'", what, msg.c_str(), mustContain);
    if (st == want)
      info("%s: refused with %s: %s", what, dmuon_status_string(st), msg.c_str());
  }
  dmuon_plan_destroy(plan);
}

// Calls out of order or with bad arguments fail with a status and a message
// (and never abort); run on every rank alike, so no collective is left half
// entered.
void checkMisuse(const dmuon::Plan &plan, const tiny::Config &cfg, const std::string &mesh) {
  const int before = gFailures;
  MPI_Comm comm = MPI_COMM_WORLD;
  dmuon_runtime_options_t opt = makeOptions(&comm, DMUON_MODE_Z3, 1);
  dmuon_runtime_t rt = nullptr;
  if (dmuon_runtime_create(plan.get(), &opt, &rt) != DMUON_SUCCESS) {
    fail("[%s] misuse: dmuon_runtime_create failed: %s", mesh.c_str(), dmuon_last_error());
    return;
  }
  auto expect = [&](dmuon_status_t got, dmuon_status_t want, const char *what) {
    if (got != want)
      fail("[%s] misuse: %s returned %s, expected %s (%s)", mesh.c_str(), what,
           dmuon_status_string(got), dmuon_status_string(want), dmuon_runtime_last_error(rt));
    else if (std::string(dmuon_runtime_last_error(rt)).empty())
      fail("[%s] misuse: %s failed without a message", mesh.c_str(), what);
  };
  const std::vector<tiny::ParamSpec> specs = tiny::paramSpecs(cfg);
  std::string muonName;
  for (int i = 0; i < plan.numParams() && muonName.empty(); ++i)
    if (plan.param(i).role == DMUON_ROLE_MUON)
      muonName = plan.param(i).name;
  std::vector<float> big(4096, 0.5f);

  expect(dmuon_runtime_bind_param(rt, "no.such.param", big.data(), 4),
         DMUON_ERROR_INVALID_ARGUMENT, "bind_param of an unknown name");
  expect(dmuon_runtime_bind_param(rt, specs[1].name.c_str(), big.data(), specs[1].numel + 1),
         DMUON_ERROR_INVALID_ARGUMENT, "bind_param with the wrong numel");
  expect(dmuon_runtime_pre_forward(rt, 0), DMUON_ERROR_INVALID_STATE,
         "pre_forward before every param is bound");
  for (const tiny::ParamSpec &spec : specs) {
    std::vector<float> v = tiny::initParam(cfg, spec, kSeed);
    if (dmuon_runtime_bind_param(rt, spec.name.c_str(), v.data(), spec.numel) != DMUON_SUCCESS)
      fail("[%s] misuse: bind_param('%s') failed after earlier refused calls: %s", mesh.c_str(),
           spec.name.c_str(), dmuon_runtime_last_error(rt));
  }
  expect(dmuon_runtime_pre_forward(rt, plan.numHookGroups()), DMUON_ERROR_INVALID_ARGUMENT,
         "pre_forward of a hook group out of range");
  void *view = nullptr;
  dmuon_status_t st = dmuon_runtime_param_view(rt, plan.findParam(muonName), &view);
  if (st == DMUON_SUCCESS)
    fail("[%s] misuse: param_view of Muon param '%s' outside its hook group's window succeeded",
         mesh.c_str(), muonName.c_str());
  float *grad = nullptr;
  st = dmuon_runtime_grad_view(rt, plan.findParam(muonName), &grad);
  if (st == DMUON_SUCCESS)
    fail("[%s] misuse: grad_view of Muon param '%s' outside backward succeeded", mesh.c_str(),
         muonName.c_str());
  // An AdamW param the hooks move (owner or sharded route) has values only
  // inside its group's window too; a replicated one always; a host-routed
  // one never (the runtime holds nothing of it).
  const int embed = plan.findParam("embed.weight");
  const bool hostRouted = plan.paramRoute(embed).route == DMUON_ROUTE_HOST;
  const bool hooked = plan.param(embed).hook_group >= 0;
  st = dmuon_runtime_param_view(rt, embed, &view);
  if (hostRouted)
    expect(st, DMUON_ERROR_INVALID_ARGUMENT, "param_view of host-routed param 'embed.weight'");
  else if (!hooked && (st != DMUON_SUCCESS || view == nullptr))
    fail("[%s] misuse: param_view of replicated param 'embed.weight' failed (%s)", mesh.c_str(),
         dmuon_runtime_last_error(rt));
  if (hooked && st == DMUON_SUCCESS)
    fail("[%s] misuse: param_view of hook-moved param 'embed.weight' outside its window "
         "succeeded",
         mesh.c_str());
  expect(dmuon_runtime_post_backward(rt, 0), DMUON_ERROR_INVALID_STATE,
         "post_backward without pre_backward");
  dmuon_runtime_destroy(rt);
  dmuon_runtime_destroy(nullptr); // a no-op, as free(NULL)
  if (gFailures == before)
    info("[%s] misuse: bad names, sizes, indices and out-of-order calls fail with a status",
         mesh.c_str());
}

int usage() {
  if (gRank == 0)
    std::fprintf(stderr, "usage: dmuon-mpi-test --plan PLAN --mesh G|RxG [--mp-plan PLAN] "
                         "[--other-world-plan PLAN]\n");
  return 2;
}

int runTests(int argc, char **argv) {
  std::string planPath, meshText, mpPlan, otherWorldPlan;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc)
        return false;
      out = argv[++i];
      return true;
    };
    bool ok = true;
    if (a == "--plan")
      ok = value(planPath);
    else if (a == "--mesh")
      ok = value(meshText);
    else if (a == "--mp-plan")
      ok = value(mpPlan);
    else if (a == "--other-world-plan")
      ok = value(otherWorldPlan);
    else
      ok = false;
    if (!ok)
      return usage();
  }
  if (planPath.empty() || meshText.empty())
    return usage();
  const Mesh mesh = parseMesh(meshText);
  if (mesh.replicas * mesh.shards != gWorld) {
    if (gRank == 0)
      std::fprintf(stderr, "dmuon-mpi-test: --mesh %s needs %d ranks, running on %d\n",
                   meshText.c_str(), mesh.replicas * mesh.shards, gWorld);
    return 2;
  }

  // Plans the runtime must refuse.
  if (!otherWorldPlan.empty())
    expectRefused(otherWorldPlan, DMUON_ERROR_MISMATCH, nullptr, "plan for another world size");
  if (!mpPlan.empty())
    expectRefused(mpPlan, DMUON_ERROR_UNSUPPORTED, "not supported yet",
                  "params with Partial placements");

  dmuon::Plan plan(planPath);
  if (plan.worldSize() != gWorld) {
    fail("the plan '%s' is for %d ranks, running on %d", planPath.c_str(), plan.worldSize(),
         gWorld);
    return 1;
  }
  tiny::Config cfg;
  cfg.globalBatch -= cfg.globalBatch % gWorld; // every rank the same share (3 ranks: 63)
  Distributed dist(plan, cfg, mesh);
  dist.checkPlanOwners();
  checkMisuse(plan, cfg, mesh.text);

  const Trajectory ref = runReference(plan, cfg);

  const RunSpec z3async{"z3/async", DMUON_MODE_Z3, 1, true};
  const RunSpec z3sync{"z3/sync", DMUON_MODE_Z3, 0, true};
  const RunSpec z2async{"z2/async", DMUON_MODE_Z2, 1, true};
  const RunSpec z2sync{"z2/sync", DMUON_MODE_Z2, 0, true};
  // Async without a synchronize between steps: the replicate broadcast really
  // overlaps the next forward.
  const RunSpec z3overlap{"z3/async, no synchronize between steps", DMUON_MODE_Z3, 1, false};
  const RunSpec z2overlap{"z2/async, no synchronize between steps", DMUON_MODE_Z2, 1, false};

  const Trajectory a = dist.run(z3async);
  info("[%s] %s: %d steps, I1-I4 and byte counts checked after every step (%d failures so far)",
       mesh.text.c_str(), z3async.label, kSteps, globalFailures());
  compareWithReference(a, ref, mesh.text);

  for (const RunSpec *spec : {&z3sync, &z2async, &z2sync, &z3overlap, &z2overlap}) {
    const Trajectory b = dist.run(*spec);
    std::string what = std::string(spec->label) + " vs " + z3async.label;
    expectIdentical(what.c_str(), b, a, mesh.text);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) { return mpicheck::runMain(argc, argv, runTests); }
