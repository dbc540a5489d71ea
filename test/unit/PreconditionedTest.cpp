// SOAP and Shampoo on the owner route, in a model that mixes every update
// rule (mixed-optimizers.toml): 10 steps on one loopback rank against each
// rule written again in double from its paper and reference code
// (OptimizerReferences.h; the MPI run, mixed_mpi_test.cpp, checks every
// rule against the same), the
// 4- and 2x2-rank runs bit-identical to the 1-rank run, the state each rank
// holds equal to the plan's count, and the state resumed on another mesh.
#include "LoopbackSupport.h"
#include "OptimizerReferences.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <set>

using namespace dmuon::rt;
using namespace dmuon::ref;

namespace {

std::unique_ptr<LoadedPlan> mixedPlan(const std::string &mesh) {
  return loadPlan(std::string(DMUON_MIXED_PLAN_DIR) + "/mixed-" + mesh + ".plan");
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
