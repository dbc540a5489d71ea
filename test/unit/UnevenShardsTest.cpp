// Tensor-parallel shards that do not divide their tensor dim (torch.chunk,
// as DTensor splits them: docs/runtime.md, "Model-parallel params") run on
// the loopback backend, one thread per rank: each rank binds, views, writes
// and gathers its own slice (the smaller one on tp coordinate 1), the runtime
// pads it to the largest inside, and three steps end where a one-rank run of
// the same model ends, for every route of the AdamW params.
#include "LoopbackSupport.h"
#include "core/ParamSlice.h"

#include <cmath>
#include <mutex>

using namespace dmuon::rt;

namespace {

std::vector<int64_t> shapeOf(const dmuon::plan::Param &p) {
  return {p.shape()->begin(), p.shape()->end()};
}

int64_t numelOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

// A value per (param, step, element of the full tensor).
float valueOf(int param, int step, int64_t i) {
  return 0.01f * std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(param) +
                          0.71f * static_cast<float>(step));
}

// Visits every element of `slice` of a tensor of `full` shape: (index in the
// full tensor, index in the slice), both row-major.
template <typename F>
void forEachInSlice(const std::vector<int64_t> &full, const dmuon_param_slice_t &slice, F f) {
  const int nd = static_cast<int>(full.size());
  std::vector<int64_t> at(static_cast<size_t>(nd), 0);
  for (int64_t k = 0; k < slice.numel; ++k) {
    int64_t flat = 0;
    for (int d = 0; d < nd; ++d)
      flat = flat * full[d] + slice.offset[d] + at[d];
    f(flat, k);
    for (int d = nd - 1; d >= 0 && ++at[d] == slice.shape[d]; --d)
      at[d] = 0;
  }
}

dmuon_param_slice_t sliceOf(const LoadedPlan &plan, int i, int rank) {
  dmuon_param_slice_t s{};
  EXPECT_TRUE(paramSlice(plan.root(), i, rank, s).isOk());
  return s;
}

// Three steps, every rank writing its slice of the same full gradients; then
// every param's full values, assembled from every rank's gather_param.
std::vector<std::vector<float>> train(const LoadedPlan &plan) {
  const int n = plan.numParams();
  std::vector<std::vector<float>> full(static_cast<size_t>(n));
  std::vector<std::vector<int>> covered(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    full[i].assign(static_cast<size_t>(numelOf(shapeOf(plan.param(i)))), 0.0f);
    covered[i].assign(full[i].size(), 0);
  }
  std::mutex mu;
  runWorld(plan, [&](int rank, Executor &ex) {
    for (int i = 0; i < n; ++i) {
      const std::string name = plan.param(i).name()->str();
      const dmuon_param_slice_t s = sliceOf(plan, i, rank);
      std::vector<float> v(static_cast<size_t>(s.numel));
      forEachInSlice(shapeOf(plan.param(i)), s,
                     [&](int64_t flat, int64_t k) { v[k] = 10 * valueOf(i, -1, flat); });
      // The largest slice's count is refused where this rank's is smaller.
      const auto *local = plan.param(i).local_shape();
      std::vector<float> padded(static_cast<size_t>(numelOf({local->begin(), local->end()})));
      if (padded.size() != v.size()) {
        EXPECT_EQ(ex.bindParam(name, padded.data(), static_cast<int64_t>(padded.size())).code(),
                  DMUON_ERROR_INVALID_ARGUMENT)
            << name << " on rank " << rank;
      }
      Status st = ex.bindParam(name, v.data(), static_cast<int64_t>(v.size()));
      ASSERT_TRUE(st.isOk()) << name << " on rank " << rank << ": " << st.message();
    }
    auto addGradients = [&](int step, int group) {
      for (int i = 0; i < n; ++i) {
        if (plan.param(i).hook_group() != group)
          continue;
        float *g = nullptr;
        ASSERT_TRUE(ex.gradView(i, &g).isOk());
        forEachInSlice(shapeOf(plan.param(i)), sliceOf(plan, i, rank),
                       [&](int64_t flat, int64_t k) { g[k] += valueOf(i, step, flat); });
      }
    };
    trainSteps(plan, ex, rank, 3, addGradients);
    for (int i = 0; i < n; ++i) {
      const dmuon_param_slice_t s = sliceOf(plan, i, rank);
      std::vector<float> out(static_cast<size_t>(s.numel));
      Status st = ex.gatherParam(plan.param(i).name()->str(), out.data(), s.numel);
      ASSERT_TRUE(st.isOk()) << st.message();
      std::lock_guard<std::mutex> lock(mu);
      forEachInSlice(shapeOf(plan.param(i)), s, [&](int64_t flat, int64_t k) {
        if (covered[i][flat]++ == 0)
          full[i][flat] = out[k];
        else
          EXPECT_EQ(full[i][flat], out[k]) << "replicas disagree at " << flat;
      });
    }
  });
  for (int i = 0; i < n; ++i)
    for (int c : covered[i])
      EXPECT_GT(c, 0) << plan.param(i).name()->str() << ": an element no rank holds";
  return full;
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
