// The runtime's range checks on what a host or a file gives it: every
// numeric option, over-long param names at the C ABI, and the size of a plan
// file (checkpoint manifests: CheckpointManifestTest.cpp).
#include "RuntimeTestSupport.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <unistd.h>

namespace {

// Creates a runtime on the 1-rank plan with `edit` applied to the options;
// returns its status (and destroys a runtime that was created).
template <typename Edit> dmuon_status_t createWith(Edit edit) {
  dmuon_plan_t plan = nullptr;
  EXPECT_EQ(dmuon_plan_load_file(planPath("1").c_str(), &plan), DMUON_SUCCESS) << lastError();
  dmuon_runtime_options_t o = mpiOptions();
  edit(o);
  dmuon_runtime_t rt = nullptr;
  dmuon_status_t st = dmuon_runtime_create(plan, &o, &rt);
  dmuon_runtime_destroy(rt);
  dmuon_plan_destroy(plan);
  return st;
}

} // namespace

TEST(RuntimeLimits, EveryNumericOptionIsRangeChecked) {
  const struct {
    void (*edit)(dmuon_runtime_options_t &);
    const char *expect;
  } cases[] = {
      {[](dmuon_runtime_options_t &o) { o.replicate_async = 7; }, "options.replicate_async=7"},
      {[](dmuon_runtime_options_t &o) { o.nesterov = -2; }, "options.nesterov=-2"},
      {[](dmuon_runtime_options_t &o) { o.manage_adamw = 3; }, "options.manage_adamw=3"},
      {[](dmuon_runtime_options_t &o) { o.lr = std::numeric_limits<double>::infinity(); },
       "options.lr=inf must be a number in [0, 10]"},
      {[](dmuon_runtime_options_t &o) { o.momentum = 2; },
       "options.momentum=2 must be a number in [0, 1)"},
      {[](dmuon_runtime_options_t &o) { o.weight_decay = -1; }, "options.weight_decay=-1"},
      {[](dmuon_runtime_options_t &o) { o.adamw_lr = 1e39; }, "options.adamw_lr=1e+39"},
      {[](dmuon_runtime_options_t &o) { o.adamw_beta2 = 1; }, "options.adamw_beta2=1"},
      {[](dmuon_runtime_options_t &o) { o.adamw_eps = 0; },
       "options.adamw_eps=0 must be a number in (0, 1]"},
      {[](dmuon_runtime_options_t &o) { o.adamw_weight_decay = -0.5; },
       "options.adamw_weight_decay=-0.5"},
      // Only DMUON_UNSET means "the plan's": another negative is an error.
      {[](dmuon_runtime_options_t &o) { o.ns_steps = -2; }, "ns_steps=-2 must be"},
  };
  for (const auto &c : cases) {
    EXPECT_EQ(createWith(c.edit), DMUON_ERROR_INVALID_ARGUMENT) << c.expect;
    EXPECT_NE(lastError().find(c.expect), std::string::npos)
        << "expected: " << c.expect << "\n     got: " << lastError();
  }
  // Unset leaves a setting to the plan; the range's ends are allowed.
  EXPECT_EQ(createWith([](dmuon_runtime_options_t &o) {
              o.lr = DMUON_UNSET_REAL;
              o.ns_steps = DMUON_UNSET;
              o.momentum = 0;
              o.replicate_async = 1;
            }),
            DMUON_SUCCESS)
      << lastError();
}

TEST_F(OneRank, OverLongParamNamesAreRefusedAsSuch) {
  std::string name(5000, 'w');
  std::vector<float> v(4, 0.f);
  EXPECT_EQ(dmuon_runtime_bind_param(rt, name.c_str(), v.data(), 4),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("is longer than 4096 bytes"), std::string::npos) << err();
}

TEST(RuntimeLimits, APlanFileOver2GiBIsRefusedUnread) {
  const std::string dir = makeTempDir(), path = dir + "/huge.plan";
  { std::ofstream(path, std::ios::binary); }
  ASSERT_EQ(::truncate(path.c_str(), int64_t(3) << 30), 0); // sparse: costs nothing
  dmuon_plan_t plan = nullptr;
  EXPECT_NE(dmuon_plan_load_file(path.c_str(), &plan), DMUON_SUCCESS);
  EXPECT_EQ(plan, nullptr);
  EXPECT_NE(lastError().find("larger than 2 GiB, the limit for a plan"), std::string::npos)
      << lastError();
  std::filesystem::remove_all(dir);
}

// lr=3e38 is finite in fp32: a plausible range refuses it everywhere a host
// sets one, instead of letting every param become Inf.
TEST_F(OneRank, ImplausibleLearningRatesAndScalesAreRefused) {
  EXPECT_EQ(createWith([](dmuon_runtime_options_t &o) { o.lr = 3e38; }),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("options.lr=3e+38 must be a number in [0, 10]"), std::string::npos)
      << lastError();
  dmuon_hyper_params_t h;
  dmuon_hyper_params_init(&h);
  h.adamw_lr = 3e38;
  EXPECT_EQ(dmuon_runtime_set_hyper_params(rt, &h), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("adamw_lr=3e+38 must be a number in [0, 10]"), std::string::npos) << err();
  EXPECT_EQ(dmuon_runtime_set_param_group_scale(rt, "*", 1e30, 1), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("lr_scale=1e+30 must be a number in [0, 100]"), std::string::npos) << err();
  // The range's end is allowed.
  dmuon_hyper_params_init(&h);
  h.lr = 10;
  EXPECT_EQ(dmuon_runtime_set_hyper_params(rt, &h), DMUON_SUCCESS) << err();
}

// Finite gradients, in-range settings, and still an update that overflows
// fp32 (params of 1e37 decayed by lr * weight_decay = 100): step() says so,
// naming a param, instead of returning success with Inf params.
TEST_F(OneRank, AStepWhoseUpdateIsNotFiniteIsReported) {
  bindAll(1e37f);
  dmuon_hyper_params_t h;
  dmuon_hyper_params_init(&h);
  h.lr = h.adamw_lr = 10;
  h.weight_decay = h.adamw_weight_decay = 10;
  ASSERT_EQ(dmuon_runtime_set_hyper_params(rt, &h), DMUON_SUCCESS) << err();
  ASSERT_NO_FATAL_FAILURE(runAllHooks(rt, dmuon_plan_num_hook_groups(plan)));
  EXPECT_EQ(dmuon_runtime_step(rt), DMUON_ERROR_NON_FINITE);
  EXPECT_NE(err().find("the update made param '"), std::string::npos) << err();
  EXPECT_NE(err().find("load a checkpoint"), std::string::npos) << err();
  EXPECT_STREQ(dmuon_status_string(DMUON_ERROR_NON_FINITE), "non-finite update");
}
