// Tensor-parallel shards that do not divide their tensor dim (torch.chunk,
// as DTensor splits them: docs/runtime.md, "Model-parallel params") run on
// the loopback backend, one thread per rank: each rank binds, views, writes
// and gathers its own slice (the smaller one on tp coordinate 1), the runtime
// pads it to the largest inside, and three steps end where a one-rank run of
// the same model ends, for every route of the AdamW params.
#include "SliceTraining.h"

#include <cmath>

using namespace dmuon::rt;

namespace {

// A value per (param, step, element of the full tensor).
float valueOf(int param, int step, int64_t i) {
  return 0.01f * std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(param) +
                          0.71f * static_cast<float>(step));
}

// Three steps of the same full gradients on every rank's slices.
std::vector<std::vector<float>> train(const LoadedPlan &plan) {
  return trainSlices(plan, 3, valueOf);
}

std::string planOf(const std::string &name) {
  return std::string(DMUON_UNEVEN_PLAN_DIR) + "/uneven-" + name + ".plan";
}

} // namespace

TEST(UnevenShards, SlicesFollowTorchChunk) {
  std::unique_ptr<LoadedPlan> plan = loadPlan(planOf("replicated"));
  ASSERT_TRUE(plan);
  // Mesh dp_shard=2,tp=2: rank 1 is tp coordinate 1.
  const dmuon_param_slice_t up0 = sliceOf(*plan, 0, 0), up1 = sliceOf(*plan, 0, 1);
  EXPECT_EQ(up0.shape[0], 6);
  EXPECT_EQ(up0.offset[0], 0);
  EXPECT_EQ(up1.shape[0], 5);
  EXPECT_EQ(up1.offset[0], 6);
  EXPECT_EQ(up1.numel, 5 * 8);
  const dmuon_param_slice_t down1 = sliceOf(*plan, 1, 3);
  EXPECT_EQ(down1.shape[1], 3);
  EXPECT_EQ(down1.offset[1], 4);
  EXPECT_EQ(sliceOf(*plan, 2, 1).shape[0], 1); // experts: 2 + 1
}

TEST(UnevenShards, EveryRouteEndsWhereOneRankEnds) {
  std::unique_ptr<LoadedPlan> one = loadPlan(planOf("1"));
  ASSERT_TRUE(one);
  const std::vector<std::vector<float>> want = train(*one);
  for (const char *route : {"replicated", "owner", "sharded"}) {
    std::unique_ptr<LoadedPlan> plan = loadPlan(planOf(route));
    ASSERT_TRUE(plan);
    const std::vector<std::vector<float>> got = train(*plan);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      double worst = 0;
      for (size_t k = 0; k < want[i].size(); ++k)
        worst = std::max(worst, static_cast<double>(std::fabs(got[i][k] - want[i][k])));
      EXPECT_LT(worst, 1e-5) << route << ": " << one->param(static_cast<int>(i)).name()->str();
    }
  }
}
