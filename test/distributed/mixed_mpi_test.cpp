// Every update rule in one model (test/unit/mixed-optimizers.toml) under the
// MPI backend, one process per rank: 10 steps on the mesh's plan, every
// param within 1e-5 relative of its rule's single-process reference
// (test/unit/OptimizerReferences.h, the references the loopback tests check
// against) and bit-identical, on every rank, to a 1-rank MPI run of the
// 1-rank plan (on MPI_COMM_SELF). The loopback tests check the same in one
// process (PreconditionedTest.cpp); this checks it over real MPI
// collectives, where a rank's buffers are its own.
//
//   mpirun -n N dmuon-mixed-mpi-test --plan mixed-MESH.plan --one-plan mixed-1.plan
#include "LoopbackSupport.h"
#include "MpiGtestMain.h"
#include "OptimizerReferences.h"
#include "backends/mpi/MpiBackend.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>

using namespace dmuon::rt;

namespace {

constexpr int kSteps = 10;

std::string gPlan, gOnePlan;
int gRank = 0, gWorld = 1;

// The run on `comm` (every rank of it calls this): what gather_param
// returns on this rank.
std::vector<std::vector<float>> trainOnMpi(const LoadedPlan &plan, MPI_Comm comm) {
  std::vector<std::vector<float>> result;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::unique_ptr<Backend> backend;
  Status s = createMpiBackend(&comm, backend);
  EXPECT_TRUE(s.isOk()) << s.message();
  if (!s.isOk())
    return result;
  dmuon_runtime_options_t options;
  dmuon_runtime_options_init(&options);
  options.collective_timeout_s = 60; // a bug fails the test instead of hanging it
  std::unique_ptr<Executor> ex;
  s = Executor::create(plan, options, std::move(backend), createCpuDevice(), ex);
  EXPECT_TRUE(s.isOk()) << "rank " << rank << ": " << s.message();
  if (s.isOk())
    trainRank(plan, {kSteps, 0, "", ""}, dmuon::ref::noise, rank, *ex, result);
  return result;
}

TEST(MixedMpi, EveryRuleEndsWhereItsReferenceAndOneRankEnd) {
  std::unique_ptr<LoadedPlan> plan = loadPlan(gPlan), one = loadPlan(gOnePlan);
  ASSERT_TRUE(plan && one);
  ASSERT_EQ(plan->worldSize(), gWorld) << gPlan;
  ASSERT_EQ(one->worldSize(), 1) << gOnePlan;
  ASSERT_EQ(plan->numParams(), one->numParams());
  const std::vector<std::vector<float>> got = trainOnMpi(*plan, MPI_COMM_WORLD);
  const std::vector<std::vector<float>> want = trainOnMpi(*one, MPI_COMM_SELF);
  ASSERT_EQ(got.size(), static_cast<size_t>(plan->numParams()));
  ASSERT_EQ(want.size(), got.size());
  std::map<std::string, double> rules; // each rule's worst relative error; all five must run
  for (int i = 0; i < plan->numParams(); ++i) {
    const dmuon::plan::Param &p = plan->param(i);
    const std::string name = p.name()->str();
    ASSERT_EQ(name, one->param(i).name()->str());
    EXPECT_EQ(got[i], want[i]) << "rank " << gRank << ": " << name << " differs from 1 rank";
    const char *rule = p.role() != dmuon::plan::Role::muon
                           ? "adamw"
                           : dmuon::plan::EnumNameMatrixOptimizer(p.matrix_optimizer());
    double &ruleWorst = rules[rule];
    if (gRank != 0) // one rank checks the references: the others hold the same values
      continue;
    const std::vector<double> byHand = dmuon::ref::referenceOf(*plan, i, kSteps);
    ASSERT_EQ(byHand.size(), got[i].size()) << name;
    double worst = 0, largest = 0, moved = 0;
    for (size_t k = 0; k < byHand.size(); ++k) {
      const double start = 10 * dmuon::ref::noise(i, -1, static_cast<int64_t>(k));
      worst = std::max(worst, std::fabs(got[i][k] - byHand[k]));
      largest = std::max(largest, std::fabs(byHand[k]));
      moved = std::max(moved, std::fabs(byHand[k] - start));
    }
    ruleWorst = std::max(ruleWorst, worst / largest);
    EXPECT_LT(worst, 1e-5 * largest) << name << " (" << rule << ")";
    EXPECT_GT(moved, 1e-3 * largest) << name << " (" << rule << ") barely moved: a vacuous match";
  }
  std::set<std::string> ran;
  for (const auto &[rule, relative] : rules) {
    ran.insert(rule);
    if (gRank == 0)
      std::printf("%s: worst |got - reference| / max |reference| %.3g\n", rule.c_str(), relative);
  }
  EXPECT_EQ(ran, (std::set<std::string>{"adamw", "muon", "normuon", "soap", "shampoo"}));
}

} // namespace

int main(int argc, char **argv) {
  return runMpiGtest(argc, argv, gRank, gWorld, {{"--plan", &gPlan}, {"--one-plan", &gOnePlan}});
}
