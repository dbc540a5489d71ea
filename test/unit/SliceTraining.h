// Training where every rank holds its own slice of tensor-parallel params
// (the loopback tests of sharded matrices): each rank binds and writes its
// slice of the same full values, so that a sharded run and a one-rank run of
// the same model see the same tensors, and the full values come back
// assembled from every rank's gather_param.
#ifndef DMUON_TEST_UNIT_SLICETRAINING_H
#define DMUON_TEST_UNIT_SLICETRAINING_H

#include "LoopbackSupport.h"
#include "core/ParamSlice.h"

#include <mutex>

namespace dmuon::rt {

inline std::vector<int64_t> shapeOf(const dmuon::plan::Param &p) {
  return {p.shape()->begin(), p.shape()->end()};
}

inline int64_t numelOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
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

inline dmuon_param_slice_t sliceOf(const LoadedPlan &plan, int i, int rank) {
  dmuon_param_slice_t s{};
  EXPECT_TRUE(paramSlice(plan.root(), i, rank, s).isOk());
  return s;
}

// One rank's part of trainSlices: binds its slice of its own stage's params
// (valueOf of the full tensor's element, times 10), trains `steps` steps
// with the same full gradients, then hands each element it holds to
// `collect(param, index in the full tensor, value)`.
inline void trainSliceRank(const LoadedPlan &plan, Executor &ex, int rank, int steps,
                           const ValueFn &valueOf,
                           const std::function<void(int, int64_t, float)> &collect) {
  const int n = plan.numParams();
  // A pipeline rank holds its own stage's params only.
  const int stage = stageOfRank(plan, rank);
  auto mine = [&](int i) { return plan.param(i).pipeline_stage() == stage; };
  for (int i = 0; i < n; ++i) {
    if (!mine(i))
      continue;
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
      if (!mine(i) || plan.param(i).hook_group() != group)
        continue;
      float *g = nullptr;
      ASSERT_TRUE(ex.gradView(i, &g).isOk());
      forEachInSlice(shapeOf(plan.param(i)), sliceOf(plan, i, rank),
                     [&](int64_t flat, int64_t k) { g[k] += valueOf(i, step, flat); });
    }
  };
  trainSteps(plan, ex, rank, steps, addGradients);
  for (int i = 0; i < n; ++i) {
    if (!mine(i))
      continue;
    const dmuon_param_slice_t s = sliceOf(plan, i, rank);
    std::vector<float> out(static_cast<size_t>(s.numel));
    Status st = ex.gatherParam(plan.param(i).name()->str(), out.data(), s.numel);
    ASSERT_TRUE(st.isOk()) << st.message();
    forEachInSlice(shapeOf(plan.param(i)), s,
                   [&](int64_t flat, int64_t k) { collect(i, flat, out[k]); });
  }
}

// `steps` steps, every rank binding and writing its slice of the same full
// values and gradients (valueOf of the full tensor's element); then every
// param's full values, assembled from every rank's gather_param.
inline std::vector<std::vector<float>> trainSlices(const LoadedPlan &plan, int steps,
                                                   const ValueFn &valueOf) {
  const int n = plan.numParams();
  std::vector<std::vector<float>> full(static_cast<size_t>(n));
  std::vector<std::vector<int>> covered(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    full[i].assign(static_cast<size_t>(numelOf(shapeOf(plan.param(i)))), 0.0f);
    covered[i].assign(full[i].size(), 0);
  }
  std::mutex mu;
  runWorld(plan, [&](int rank, Executor &ex) {
    trainSliceRank(plan, ex, rank, steps, valueOf, [&](int i, int64_t flat, float v) {
      std::lock_guard<std::mutex> lock(mu);
      if (covered[i][flat]++ == 0)
        full[i][flat] = v;
      else
        EXPECT_EQ(full[i][flat], v) << "replicas disagree at " << flat;
    });
  });
  for (int i = 0; i < n; ++i)
    for (int c : covered[i])
      EXPECT_GT(c, 0) << plan.param(i).name()->str() << ": an element no rank holds";
  return full;
}

} // namespace dmuon::rt

#endif
