// What the runtime's C ABI tests share: the tiny plans, MPI options on
// MPI_COMM_WORLD (one rank: a singleton, no mpirun needed), and a fixture
// with a runtime on the 1-rank plan.
#ifndef DMUON_TEST_UNIT_RUNTIMETESTSUPPORT_H
#define DMUON_TEST_UNIT_RUNTIMETESTSUPPORT_H

#include "dmuon/dmuon.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

inline std::string planPath(const std::string &mesh) {
  return std::string(DMUON_TINY_PLAN_DIR) + "/tiny-" + mesh + ".plan";
}

inline std::string lastError() { return dmuon_last_error(); }

inline std::string makeTempDir() {
  char dir[] = "/tmp/dmuon-test-XXXXXX";
  EXPECT_NE(::mkdtemp(dir), nullptr);
  return dir;
}

// An output struct with its header set, as callers of the C ABI must.
template <typename T> T versioned(uint32_t version) {
  T out{};
  out.struct_size = sizeof out;
  out.version = version;
  return out;
}

inline dmuon_runtime_options_t mpiOptions() {
  static MPI_Comm world = MPI_COMM_WORLD;
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.backend = DMUON_BACKEND_MPI;
  o.communicator = &world;
  return o;
}

// One forward and backward of a micro-batch through all `groups` hook
// groups in order, writing no gradient (they stay as the hooks leave them).
inline void runAllHooks(dmuon_runtime_t rt, int groups) {
  for (int g = 0; g < groups; ++g) {
    ASSERT_EQ(dmuon_runtime_pre_forward(rt, g), DMUON_SUCCESS) << dmuon_runtime_last_error(rt);
    ASSERT_EQ(dmuon_runtime_post_forward(rt, g), DMUON_SUCCESS) << dmuon_runtime_last_error(rt);
  }
  for (int g = groups - 1; g >= 0; --g) {
    ASSERT_EQ(dmuon_runtime_pre_backward(rt, g), DMUON_SUCCESS) << dmuon_runtime_last_error(rt);
    ASSERT_EQ(dmuon_runtime_post_backward(rt, g), DMUON_SUCCESS) << dmuon_runtime_last_error(rt);
  }
}

class OneRank : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(dmuon_plan_load_file(planPath("1").c_str(), &plan), DMUON_SUCCESS) << lastError();
    dmuon_runtime_options_t o = mpiOptions();
    ASSERT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_SUCCESS) << lastError();
  }
  void TearDown() override {
    dmuon_runtime_destroy(rt);
    dmuon_plan_destroy(plan);
  }
  void bindAll(float value) {
    for (int i = 0; i < dmuon_plan_num_params(plan); ++i) {
      dmuon_param_info_t info = versioned<dmuon_param_info_t>(DMUON_PARAM_INFO_VERSION);
      ASSERT_EQ(dmuon_plan_param_info(plan, i, &info), DMUON_SUCCESS);
      std::vector<float> v(info.numel, value);
      ASSERT_EQ(dmuon_runtime_bind_param(rt, info.name, v.data(), info.numel), DMUON_SUCCESS)
          << dmuon_runtime_last_error(rt);
    }
  }
  std::string err() { return dmuon_runtime_last_error(rt); }
  int indexOf(const char *name) {
    int index = -1;
    EXPECT_EQ(dmuon_plan_find_param(plan, name, &index), DMUON_SUCCESS) << name;
    return index;
  }

  dmuon_plan_t plan = nullptr;
  dmuon_runtime_t rt = nullptr;
};

#endif
