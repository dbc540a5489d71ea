// What the loopback tests share: a plan read from a file, a world of
// executors, one thread per rank, on the loopback backend, and training steps
// through every hook group, and a whole run of them.
#ifndef DMUON_TEST_UNIT_LOOPBACKSUPPORT_H
#define DMUON_TEST_UNIT_LOOPBACKSUPPORT_H

#include "backends/loopback/LoopbackBackend.h"
#include "core/LoadedPlan.h"
#include "devices/CpuDevice.h"
#include "dmuon/dmuon.h"
#include "exec/Executor.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dmuon::rt {

inline std::unique_ptr<LoadedPlan> loadPlan(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  std::unique_ptr<LoadedPlan> plan;
  Status s = LoadedPlan::create(std::move(bytes), plan);
  EXPECT_TRUE(s.isOk()) << path << ": " << s.message();
  return plan;
}

// Runs `body(rank, executor)` on one thread per rank of the plan's world,
// with a collective timeout of `timeout` seconds (0: none).
inline void runWorld(const LoadedPlan &plan, const std::function<void(int, Executor &)> &body,
                     double timeout = 60) {
  const int world = plan.worldSize();
  std::shared_ptr<LoopbackFabric> fabric = createLoopbackFabric(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      std::unique_ptr<Backend> backend;
      ASSERT_TRUE(createLoopbackBackend(fabric, r, backend).isOk());
      dmuon_runtime_options_t options;
      dmuon_runtime_options_init(&options);
      options.collective_timeout_s = timeout; // 60: a bug fails the test instead of hanging it
      std::unique_ptr<Executor> ex;
      Status s = Executor::create(plan, options, std::move(backend), createCpuDevice(), ex);
      ASSERT_TRUE(s.isOk()) << "rank " << r << ": " << s.message();
      body(r, *ex);
    });
  for (std::thread &t : ranks)
    t.join();
}

// The pipeline stage of `rank` (0 without a pp dim): it holds and hooks
// only that stage's params and groups.
inline int stageOfRank(const LoadedPlan &plan, int rank) {
  return Topology::of(plan.root(), rank).stage;
}

// `steps` training steps on one rank: every hook group's forward hooks (of
// the rank's stage), then backward in reverse with `addGradients(step,
// group)` between its hooks (group -1 first: the params no hook moves), then
// the step.
// `afterStep` (optional) takes each step's status; without it every step
// must succeed.
inline void trainSteps(const LoadedPlan &plan, Executor &ex, int rank, int steps,
                       const std::function<void(int step, int group)> &addGradients,
                       const std::function<void(int step, const Status &)> &afterStep = {}) {
  const int groups = plan.root().hook_groups() ? plan.root().hook_groups()->size() : 0;
  const int stage = stageOfRank(plan, rank);
  auto onStage = [&](int g) {
    return plan.root().hook_groups()->Get(g)->pipeline_stage() == stage;
  };
  for (int step = 0; step < steps; ++step) {
    for (int g = 0; g < groups; ++g) {
      if (!onStage(g))
        continue;
      ASSERT_TRUE(ex.preForward(g).isOk());
      ASSERT_TRUE(ex.postForward(g).isOk());
    }
    addGradients(step, -1);
    for (int g = groups - 1; g >= 0; --g) {
      if (!onStage(g))
        continue;
      ASSERT_TRUE(ex.preBackward(g).isOk());
      addGradients(step, g);
      Status s = ex.postBackward(g);
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    Status s = ex.step();
    if (afterStep) {
      afterStep(step, s);
      continue;
    }
    ASSERT_TRUE(s.isOk()) << "rank " << rank << " step " << step << ": " << s.message();
  }
}

// A value per (param, step, element), the same on every rank: what a run
// binds (step -1, times 10) and adds to the gradients.
using ValueFn = std::function<float(int param, int step, int64_t i)>;

inline int64_t numel(const dmuon::plan::Param &p) {
  int64_t n = 1;
  for (int64_t d : *(p.local_shape() && p.local_shape()->size() ? p.local_shape() : p.shape()))
    n *= d;
  return n;
}

// Binds every param to its step -1 values.
inline void bindAll(const LoadedPlan &plan, Executor &ex, const ValueFn &valueOf) {
  for (int i = 0; i < plan.numParams(); ++i) {
    std::vector<float> v(static_cast<size_t>(numel(plan.param(i))));
    for (size_t k = 0; k < v.size(); ++k)
      v[k] = 10 * valueOf(i, -1, static_cast<int64_t>(k));
    ASSERT_TRUE(
        ex.bindParam(plan.param(i).name()->str(), v.data(), static_cast<int64_t>(v.size())).isOk());
  }
}

// How trainWith() runs: its steps (numbered from `firstStep`: the gradients
// depend on the number), and the checkpoint it resumes from and saves to.
struct Run {
  Run(int steps = 3, int firstStep = 0, std::string resumeFrom = "", std::string saveTo = "")
      : steps(steps), firstStep(firstStep), resumeFrom(std::move(resumeFrom)),
        saveTo(std::move(saveTo)) {}
  int steps, firstStep;
  std::string resumeFrom, saveTo;
  // Set with set_hyper_params after binding (and resuming), on every rank.
  std::optional<dmuon_hyper_params_t> hyper;
};

// trainSteps' addGradients: `valueOf`'s values (steps numbered from
// `firstStep`) added to the gradients of the group's params.
inline std::function<void(int, int)> gradientsOf(const LoadedPlan &plan, Executor &ex,
                                                 const ValueFn &valueOf, int firstStep = 0) {
  return [&plan, &ex, valueOf, firstStep](int step, int group) {
    for (int i = 0; i < plan.numParams(); ++i) {
      if (plan.param(i).hook_group() != group)
        continue;
      float *g = nullptr;
      ASSERT_TRUE(ex.gradView(i, &g).isOk());
      for (int64_t k = 0; k < numel(plan.param(i)); ++k)
        g[k] += valueOf(i, firstStep + step, k);
    }
  };
}

// Every param's values as gather_param returns them on this rank.
inline void gatherAll(const LoadedPlan &plan, Executor &ex,
                      std::vector<std::vector<float>> &result) {
  result.assign(static_cast<size_t>(plan.numParams()), {});
  for (int i = 0; i < plan.numParams(); ++i) {
    std::vector<float> &out = result[static_cast<size_t>(i)];
    out.resize(static_cast<size_t>(numel(plan.param(i))));
    ASSERT_TRUE(
        ex.gatherParam(plan.param(i).name()->str(), out.data(), static_cast<int64_t>(out.size()))
            .isOk());
  }
}

// One rank's part of a run on `ex` (any backend: the loopback world's
// threads, or one MPI process each): the steps through every hook, with
// `valueOf`'s gradients, then every param's values as gather_param returns
// them on this rank.
inline void trainRank(const LoadedPlan &plan, const Run &run, const ValueFn &valueOf, int rank,
                      Executor &ex, std::vector<std::vector<float>> &result) {
  bindAll(plan, ex, valueOf);
  if (!run.resumeFrom.empty()) {
    Status s = ex.loadCheckpoint(run.resumeFrom, nullptr);
    ASSERT_TRUE(s.isOk()) << s.message();
  }
  if (run.hyper) {
    Status s = ex.setHyperParams(*run.hyper);
    ASSERT_TRUE(s.isOk()) << s.message();
  }
  trainSteps(plan, ex, rank, run.steps, gradientsOf(plan, ex, valueOf, run.firstStep));
  if (!run.saveTo.empty()) {
    Status s = ex.saveCheckpoint(run.saveTo, run.firstStep + run.steps);
    ASSERT_TRUE(s.isOk()) << s.message();
  }
  gatherAll(plan, ex, result);
}

// The run on the plan's loopback world: rank 0's trainRank() values.
inline std::vector<std::vector<float>> trainWith(const LoadedPlan &plan, const Run &run,
                                                 const ValueFn &valueOf) {
  std::vector<std::vector<float>> result;
  runWorld(plan, [&](int rank, Executor &ex) {
    std::vector<std::vector<float>> mine;
    trainRank(plan, run, valueOf, rank, ex, mine);
    if (rank == 0)
      result = std::move(mine);
  });
  return result;
}

// Every rank of `plan`, bound, holds the optimizer state (the momentum
// account: every matrix rule's) its plan counts, and some.
inline void expectStateAsPlanned(const LoadedPlan &plan, const ValueFn &valueOf,
                                 const std::string &what) {
  runWorld(plan, [&](int rank, Executor &ex) {
    bindAll(plan, ex, valueOf);
    dmuon_memory_report_t held{}, planned{};
    ex.memory(held);
    ex.plannedMemory(planned);
    EXPECT_EQ(held.momentum.peak, planned.momentum.peak) << what << " rank " << rank;
    EXPECT_GT(held.momentum.peak, 0u) << what << " rank " << rank;
  });
}

} // namespace dmuon::rt

#endif
