// What the loopback tests share: a plan read from a file, a world of
// executors, one thread per rank, on the loopback backend, and training steps
// through every hook group.
#ifndef DMUON_TEST_UNIT_LOOPBACKSUPPORT_H
#define DMUON_TEST_UNIT_LOOPBACKSUPPORT_H

#include "backends/loopback/LoopbackBackend.h"
#include "exec/Executor.h"
#include "core/LoadedPlan.h"
#include "devices/CpuDevice.h"
#include "dmuon/dmuon.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
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

// Runs `body(rank, executor)` on one thread per rank of the plan's world.
inline void runWorld(const LoadedPlan &plan, const std::function<void(int, Executor &)> &body) {
  const int world = plan.worldSize();
  std::shared_ptr<LoopbackFabric> fabric = createLoopbackFabric(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      std::unique_ptr<Backend> backend;
      ASSERT_TRUE(createLoopbackBackend(fabric, r, backend).isOk());
      dmuon_runtime_options_t options;
      dmuon_runtime_options_init(&options);
      options.collective_timeout_s = 60; // a bug fails the test instead of hanging it
      std::unique_ptr<Executor> ex;
      Status s = Executor::create(plan, options, std::move(backend), createCpuDevice(), ex);
      ASSERT_TRUE(s.isOk()) << "rank " << r << ": " << s.message();
      body(r, *ex);
    });
  for (std::thread &t : ranks)
    t.join();
}

// `steps` training steps on one rank: every hook group's forward hooks, then
// backward in reverse with `addGradients(step, group)` between its hooks
// (group -1 first: the params no hook moves), then the step.
inline void trainSteps(const LoadedPlan &plan, Executor &ex, int rank, int steps,
                       const std::function<void(int step, int group)> &addGradients) {
  const int groups = plan.root().hook_groups() ? plan.root().hook_groups()->size() : 0;
  for (int step = 0; step < steps; ++step) {
    for (int g = 0; g < groups; ++g) {
      ASSERT_TRUE(ex.preForward(g).isOk());
      ASSERT_TRUE(ex.postForward(g).isOk());
    }
    addGradients(step, -1);
    for (int g = groups - 1; g >= 0; --g) {
      ASSERT_TRUE(ex.preBackward(g).isOk());
      addGradients(step, g);
      Status s = ex.postBackward(g);
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    Status s = ex.step();
    ASSERT_TRUE(s.isOk()) << "rank " << rank << " step " << step << ": " << s.message();
  }
}

} // namespace dmuon::rt

#endif
