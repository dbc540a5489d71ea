// Pipeline stages beside tensor parallelism under the MPI backend, one
// process per rank (test/unit/pipeline-tp.toml: two layers of tp-sharded
// matrices; the tiny host of pipeline_test.cpp has no tensor parallelism).
// Each rank binds, hooks and feeds its own slice of its own stage's params
// (test/unit/SliceTraining.h); after 10 steps the params, assembled from
// every rank, equal bit for bit a 1-rank MPI run of the 1-rank plan (on
// MPI_COMM_SELF), whose loopback twin is
// Loopback.PipelineWithTensorParallelEndsWhereOneRankEnds.
//
//   mpirun -n 4 dmuon-pipeline-tp-mpi-test --plan pipeline-tp-pp2-tp2.plan
//       --one-plan pipeline-tp-1.plan
#include "MpiGtestMain.h"
#include "SliceTraining.h"
#include "backends/mpi/MpiBackend.h"

#include <mpi.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

using namespace dmuon::rt;

namespace {

constexpr int kSteps = 10;

std::string gPlan, gOnePlan;
int gRank = 0, gWorld = 1;

float valueOf(int param, int step, int64_t i) {
  return 0.01f * std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(param) +
                          0.71f * static_cast<float>(step));
}

// The run on `comm` (every rank of it calls this): every param's full
// values on every rank, each element from the lowest rank that holds it
// (the others add 0: the sum is that rank's value exactly).
std::vector<std::vector<float>> trainOnMpi(const LoadedPlan &plan, MPI_Comm comm) {
  const int n = plan.numParams();
  std::vector<std::vector<float>> full(static_cast<size_t>(n));
  std::vector<std::vector<int>> holder(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    full[i].assign(static_cast<size_t>(numelOf(shapeOf(plan.param(i)))), 0.0f);
    holder[i].assign(full[i].size(), INT_MAX);
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::unique_ptr<Backend> backend;
  Status s = createMpiBackend(&comm, backend);
  EXPECT_TRUE(s.isOk()) << s.message();
  dmuon_runtime_options_t options;
  dmuon_runtime_options_init(&options);
  options.collective_timeout_s = 60; // a bug fails the test instead of hanging it
  std::unique_ptr<Executor> ex;
  if (s.isOk())
    s = Executor::create(plan, options, std::move(backend), createCpuDevice(), ex);
  EXPECT_TRUE(s.isOk()) << "rank " << rank << ": " << s.message();
  std::vector<std::vector<float>> mine = full;
  if (s.isOk())
    trainSliceRank(plan, *ex, rank, kSteps, valueOf, [&](int i, int64_t flat, float v) {
      mine[i][flat] = v;
      holder[i][flat] = rank;
    });
  for (int i = 0; i < n; ++i) {
    const int count = static_cast<int>(full[i].size());
    MPI_Allreduce(MPI_IN_PLACE, holder[i].data(), count, MPI_INT, MPI_MIN, comm);
    for (int k = 0; k < count; ++k) {
      EXPECT_NE(holder[i][k], INT_MAX) << plan.param(i).name()->str() << ": element " << k
                                       << " no rank holds";
      if (holder[i][k] != rank)
        mine[i][k] = 0.0f;
    }
    MPI_Allreduce(mine[i].data(), full[i].data(), count, MPI_FLOAT, MPI_SUM, comm);
  }
  return full;
}

TEST(PipelineTpMpi, StagesWithTensorParallelEndWhereOneRankEnds) {
  std::unique_ptr<LoadedPlan> plan = loadPlan(gPlan), one = loadPlan(gOnePlan);
  ASSERT_TRUE(plan && one);
  ASSERT_EQ(plan->worldSize(), gWorld) << gPlan;
  ASSERT_GT(plan->root().mesh()->num_stages(), 1) << gPlan;
  ASSERT_EQ(one->worldSize(), 1) << gOnePlan;
  ASSERT_EQ(plan->numParams(), one->numParams());
  const std::vector<std::vector<float>> got = trainOnMpi(*plan, MPI_COMM_WORLD);
  const std::vector<std::vector<float>> want = trainOnMpi(*one, MPI_COMM_SELF);
  for (int i = 0; i < plan->numParams(); ++i) {
    const std::string name = plan->param(i).name()->str();
    ASSERT_EQ(name, one->param(i).name()->str());
    EXPECT_NE(want[i][1], 10 * valueOf(i, -1, 1)) << name << " did not train";
    EXPECT_EQ(got[i], want[i]) << "rank " << gRank << ": " << name << " differs from 1 rank";
  }
}

} // namespace

int main(int argc, char **argv) {
  return runMpiGtest(argc, argv, gRank, gWorld, {{"--plan", &gPlan}, {"--one-plan", &gOnePlan}});
}
