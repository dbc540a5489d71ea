// The executor at several ranks without MPI: the loopback backend runs each
// rank as a thread of this process. A 4-rank and a 2x2 run of the tiny model,
// every rank fed the same gradients, end where a 1-rank run ends; on the
// expert-parallel plan each dense param has one owner over dp x ep; and the
// backend itself turns mismatched or missing collectives into errors.
// Pipeline stages: LoopbackPipelineTest.cpp.
#include "LoopbackSupport.h"
#include "LoopbackValues.h"
#include "OptimizerReferences.h"

#include "kernels/cpu/MuonKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

using namespace dmuon::rt;

namespace {

// The run's steps of the tiny model through every hook, then every param's
// values as gather_param returns them.
std::vector<std::vector<float>> train(const LoadedPlan &plan, const Run &run = {}) {
  return trainWith(plan, run, valueOf);
}

} // namespace

TEST(Loopback, ShardedRunsEndWhereOneRankEnds) {
  std::unique_ptr<LoadedPlan> one = loadPlan(tinyPlan("1"));
  ASSERT_TRUE(one);
  const std::vector<std::vector<float>> want = train(*one);
  for (const char *mesh : {"4", "2x2"}) {
    std::unique_ptr<LoadedPlan> plan = loadPlan(tinyPlan(mesh));
    ASSERT_TRUE(plan);
    const std::vector<std::vector<float>> got = train(*plan);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      double worst = 0;
      for (size_t k = 0; k < want[i].size(); ++k)
        worst = std::max(worst, static_cast<double>(std::fabs(got[i][k] - want[i][k])));
      EXPECT_LT(worst, 1e-5) << mesh << ": " << one->param(static_cast<int>(i)).name()->str();
    }
  }
}

TEST(Loopback, NorMuonRunsEndWhereOneRankAndThePaperEnd) {
  const std::string dir = DMUON_NORMUON_PLAN_DIR;
  std::unique_ptr<LoadedPlan> one = loadPlan(dir + "/tiny-1.plan");
  ASSERT_TRUE(one);
  const std::vector<std::vector<float>> want = train(*one);
  int matrices = 0;
  for (int i = 0; i < one->numParams(); ++i) {
    const dmuon::plan::Param &p = one->param(i);
    if (p.matrix_optimizer() != dmuon::plan::MatrixOptimizer::normuon)
      continue;
    ++matrices;
    // NorMuon as its paper writes it (OptimizerReferences.h).
    const std::vector<double> byHand = dmuon::ref::muonByHand(*one, i, 3, valueOf, true);
    double worst = 0, largest = 0;
    for (size_t k = 0; k < byHand.size(); ++k) {
      worst = std::max(worst, std::fabs(want[i][k] - byHand[k]));
      largest = std::max(largest, std::fabs(byHand[k]));
    }
    EXPECT_LT(worst, 1e-5 * largest) << p.name()->str();
  }
  EXPECT_EQ(matrices, 8); // the tiny model's block matrices
  for (const char *mesh : {"4", "2x2"}) {
    std::unique_ptr<LoadedPlan> plan = loadPlan(dir + "/tiny-" + mesh + ".plan");
    ASSERT_TRUE(plan);
    const std::vector<std::vector<float>> got = train(*plan);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << mesh << ": " << one->param(static_cast<int>(i)).name()->str();
  }
}

// Every rank holds the NorMuon state its plan counts (momentum_bytes: the
// momentum and one fp32 per row).
TEST(Loopback, NorMuonStateIsWhatThePlanCounts) {
  for (const char *mesh : {"1", "4", "2x2"}) {
    std::unique_ptr<LoadedPlan> plan =
        loadPlan(std::string(DMUON_NORMUON_PLAN_DIR) + "/tiny-" + mesh + ".plan");
    ASSERT_TRUE(plan);
    expectStateAsPlanned(*plan, valueOf, mesh);
  }
}

// NorMuon's state (momentum and the per-row second moment) saved on one rank
// resumes on 2x2 where an unbroken run goes.
TEST(Loopback, NorMuonStateResumesOnAnotherMesh) {
  const std::string dir = DMUON_NORMUON_PLAN_DIR;
  std::unique_ptr<LoadedPlan> one = loadPlan(dir + "/tiny-1.plan");
  std::unique_ptr<LoadedPlan> four = loadPlan(dir + "/tiny-2x2.plan");
  ASSERT_TRUE(one && four);
  char tmpl[] = "/tmp/dmuon-normuon-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string ckpt = std::string(tmpl) + "/ckpt";
  const std::vector<std::vector<float>> unbroken = train(*one, {4, 0, "", ""});
  train(*one, {3, 0, "", ckpt});
  const std::vector<std::vector<float>> resumed = train(*four, {1, 3, ckpt, ""});
  for (size_t i = 0; i < unbroken.size(); ++i)
    EXPECT_EQ(resumed[i], unbroken[i]) << one->param(static_cast<int>(i)).name()->str();
  std::filesystem::remove_all(tmpl);
}

TEST(Loopback, DenseParamsHaveOneOwnerOverDpAndEp) {
  std::unique_ptr<LoadedPlan> plan = loadPlan(DMUON_EP_PLAN);
  ASSERT_TRUE(plan);
  const int n = plan->numParams(), world = plan->worldSize();
  std::vector<std::vector<int>> owners(static_cast<size_t>(n), std::vector<int>(world, 0));
  runWorld(*plan, [&](int rank, Executor &ex) {
    for (int i = 0; i < n; ++i) {
      dmuon_param_state_t s{};
      ASSERT_TRUE(ex.paramState(plan->param(i).name()->str(), s).isOk());
      owners[static_cast<size_t>(i)][static_cast<size_t>(rank)] = s.is_owner;
    }
  });
  int dense = 0;
  for (int i = 0; i < n; ++i) {
    const dmuon::plan::Param &p = plan->param(i);
    if (p.role() != dmuon::plan::Role::muon)
      continue;
    int count = 0;
    for (int o : owners[static_cast<size_t>(i)])
      count += o;
    // A dense param: one owner in the world; an expert: one per ep coordinate.
    const bool spansEp = p.data_dims() && p.data_dims()->size() > 0;
    dense += spansEp;
    EXPECT_EQ(count, spansEp ? 1 : 2) << p.name()->str();
    if (spansEp) {
      EXPECT_EQ(owners[static_cast<size_t>(i)][static_cast<size_t>(p.owner_rank())], 1)
          << p.name()->str() << ": owner_rank " << p.owner_rank();
    }
  }
  EXPECT_GT(dense, 0);
}

// ----------------------------------------------------------------- backend

TEST(Loopback, MismatchedCollectivesAreErrorsOnEveryRank) {
  std::shared_ptr<LoopbackFabric> fabric = createLoopbackFabric(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      std::unique_ptr<Backend> b;
      ASSERT_TRUE(createLoopbackBackend(fabric, r, b).isOk());
      std::vector<uint8_t> buf(16, static_cast<uint8_t>(r));
      RequestId id;
      ASSERT_TRUE(b->broadcast(Communicator::World, buf.data(), r == 0 ? 8 : 16, 0, id).isOk());
      errors[static_cast<size_t>(r)] = b->wait(id).message();
    });
  for (std::thread &t : ranks)
    t.join();
  for (const std::string &e : errors)
    EXPECT_NE(e.find("loopback collective mismatch: broadcast of 8"), std::string::npos) << e;
}

TEST(Loopback, APeerThatNeverJoinsTimesOut) {
  std::shared_ptr<LoopbackFabric> fabric = createLoopbackFabric(2);
  std::unique_ptr<Backend> b;
  ASSERT_TRUE(createLoopbackBackend(fabric, 0, b).isOk());
  b->setTimeout(0.05);
  float x = 1;
  RequestId id;
  ASSERT_TRUE(b->allReduceSum(Communicator::World, &x, 1, id).isOk());
  Status s = b->wait(id);
  EXPECT_NE(s.message().find("loopback rank 0 timed out"), std::string::npos) << s.message();
  // As with MPI, a rank that timed out refuses further work.
  EXPECT_FALSE(b->allReduceSum(Communicator::World, &x, 1, id).isOk());
}

TEST(Loopback, CollectivesComputeWhatMpiWould) {
  std::shared_ptr<LoopbackFabric> fabric = createLoopbackFabric(3);
  std::vector<std::vector<float>> sums(3), scattered(3), gathered(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      std::unique_ptr<Backend> b;
      ASSERT_TRUE(createLoopbackBackend(fabric, r, b).isOk());
      // Split into {0, 2} (key order 2, 0) and {1}.
      Communicator pair;
      ASSERT_TRUE(b->createGroup({r % 2, -r}, pair).isOk());
      std::vector<float> v = {float(r), float(10 * r)};
      RequestId a, c, d;
      ASSERT_TRUE(b->allReduceSum(pair, v.data(), 2, a).isOk());
      std::vector<float> send = {1, 2, 3, 4, 5, 6};
      for (float &x : send)
        x *= static_cast<float>(r + 1);
      std::vector<float> mine(2);
      ASSERT_TRUE(b->reduceScatterSum(Communicator::World, send.data(), mine.data(), 2, c).isOk());
      std::vector<float> all(3, 0);
      const float one = static_cast<float>(r);
      ASSERT_TRUE(b->gather(Communicator::World, &one, all.data(), 1, 2, d).isOk());
      ASSERT_TRUE(b->wait(a).isOk());
      ASSERT_TRUE(b->wait(c).isOk());
      ASSERT_TRUE(b->wait(d).isOk());
      EXPECT_EQ(b->groupSize(pair), r == 1 ? 1 : 2);
      // {0, 2} ordered by key -r: rank 2 first.
      EXPECT_EQ(b->groupRank(pair), r == 0 ? 1 : 0);
      sums[static_cast<size_t>(r)] = v;
      scattered[static_cast<size_t>(r)] = mine;
      gathered[static_cast<size_t>(r)] = all;
    });
  for (std::thread &t : ranks)
    t.join();
  EXPECT_EQ(sums[0], (std::vector<float>{2, 20}));
  EXPECT_EQ(sums[2], (std::vector<float>{2, 20}));
  EXPECT_EQ(sums[1], (std::vector<float>{1, 10}));
  // Rank k gets the sum of floats [2k, 2k+2) over ranks weighted 1, 2, 3.
  EXPECT_EQ(scattered[0], (std::vector<float>{6, 12}));
  EXPECT_EQ(scattered[1], (std::vector<float>{18, 24}));
  EXPECT_EQ(scattered[2], (std::vector<float>{30, 36}));
  EXPECT_EQ(gathered[2], (std::vector<float>{0, 1, 2}));
}
