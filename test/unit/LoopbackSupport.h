// What the loopback tests share: a plan read from a file, and a world of
// executors, one thread per rank, on the loopback backend.
#ifndef DMUON_TEST_UNIT_LOOPBACKSUPPORT_H
#define DMUON_TEST_UNIT_LOOPBACKSUPPORT_H

#include "backends/loopback/LoopbackBackend.h"
#include "core/Executor.h"
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

} // namespace dmuon::rt

#endif
