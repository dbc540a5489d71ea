// The C ABI on one rank: option checks, call-order errors (the runtime stays
// usable after each), and one step's numerics. Loading plans and reading
// them: PlanApiTest.cpp.
#include "RuntimeTestSupport.h"
#include "dmuon/dmuon.h"
#include "dmuon/plan_generated.h"
#include "kernels/cpu/MuonKernels.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

// The runtime holds its plan: the host may destroy its handle right after
// create, and names from the plan stay valid through the runtime.
TEST(RuntimeCreate, TheRuntimeKeepsItsPlanAlive) {
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(planPath("1").c_str(), &plan), DMUON_SUCCESS) << lastError();
  const int n = dmuon_plan_num_params(plan);
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  for (int i = 0; i < n; ++i) {
    dmuon_param_info_t info = versioned<dmuon_param_info_t>(DMUON_PARAM_INFO_VERSION);
    ASSERT_EQ(dmuon_plan_param_info(plan, i, &info), DMUON_SUCCESS);
    names.push_back(info.name);
    sizes.push_back(info.numel);
  }
  const int groups = dmuon_plan_num_hook_groups(plan);
  dmuon_runtime_options_t o = mpiOptions();
  dmuon_runtime_t rt = nullptr;
  ASSERT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_SUCCESS) << lastError();
  dmuon_plan_destroy(plan);
  auto err = [&] { return std::string(dmuon_runtime_last_error(rt)); };
  for (int i = 0; i < n; ++i) {
    std::vector<float> v(static_cast<size_t>(sizes[i]), 0.5f);
    ASSERT_EQ(dmuon_runtime_bind_param(rt, names[i].c_str(), v.data(), sizes[i]), DMUON_SUCCESS)
        << err();
  }
  ASSERT_NO_FATAL_FAILURE(runAllHooks(rt, groups));
  EXPECT_EQ(dmuon_runtime_step(rt), DMUON_SUCCESS) << err();
  void *view = nullptr;
  EXPECT_EQ(dmuon_runtime_param_view(rt, n, &view), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("param index " + std::to_string(n) + " is out of range"), std::string::npos)
      << err();
  dmuon_comm_counters_t counters{};
  EXPECT_EQ(dmuon_runtime_planned_counters(rt, &counters), DMUON_ERROR_INVALID_ARGUMENT);
  counters = versioned<dmuon_comm_counters_t>(DMUON_COMM_COUNTERS_VERSION);
  EXPECT_EQ(dmuon_runtime_planned_counters(rt, &counters), DMUON_SUCCESS) << err();
  dmuon_runtime_destroy(rt);
}

TEST(RuntimeCreate, PlanForAnotherWorldSizeIsAMismatch) {
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(planPath("4").c_str(), &plan), DMUON_SUCCESS) << lastError();
  dmuon_runtime_options_t o = mpiOptions();
  dmuon_runtime_t rt = nullptr;
  EXPECT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_ERROR_MISMATCH);
  EXPECT_EQ(rt, nullptr);
  EXPECT_NE(lastError().find("plan for 4 ranks but the communicator has 1"), std::string::npos)
      << lastError();
  dmuon_plan_destroy(plan);
}

TEST(RuntimeCreate, OptionsAreChecked) {
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(planPath("1").c_str(), &plan), DMUON_SUCCESS) << lastError();
  dmuon_runtime_t rt = nullptr;

  dmuon_runtime_options_t raw{};
  EXPECT_EQ(dmuon_runtime_create(plan, &raw, &rt), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("dmuon_runtime_options_init"), std::string::npos);

  dmuon_runtime_options_t o = mpiOptions();
  o.version = 99;
  EXPECT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("newer"), std::string::npos);

  // A null communicator is this process alone (MPI_COMM_SELF): a 1-rank
  // plan runs on it (runtime_self_mpi covers a host without MPI_Init).
  o = mpiOptions();
  o.communicator = nullptr;
  ASSERT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_SUCCESS) << lastError();
  dmuon_runtime_destroy(rt);
  rt = nullptr;

  dmuon_plan_destroy(plan);
}

TEST(RuntimeCreate, NcclWithoutAStreamOrPluginIsRefused) {
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(planPath("1").c_str(), &plan), DMUON_SUCCESS) << lastError();
  dmuon_runtime_options_t o = mpiOptions();
  o.backend = DMUON_BACKEND_NCCL;
  dmuon_runtime_t rt = nullptr;
  dmuon_status_t st = dmuon_runtime_create(plan, &o, &rt);
  EXPECT_EQ(rt, nullptr);
#ifdef DMUON_TEST_HAVE_NCCL_PLUGIN
  // The plugin loads (no GPU needed) and refuses the missing compute stream.
  EXPECT_EQ(st, DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("options.stream is null"), std::string::npos) << lastError();
#else
  EXPECT_EQ(st, DMUON_ERROR_UNSUPPORTED);
  EXPECT_NE(lastError().find("NCCL backend is not available"), std::string::npos) << lastError();
#endif
  dmuon_plan_destroy(plan);
}

// One rule for what a host leaves to the plan: DMUON_UNSET in int and enum
// fields, DMUON_UNSET_REAL in real-valued ones, as the init functions write.
TEST(RuntimeCreate, InitLeavesEveryPlanSettingUnset) {
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  EXPECT_EQ(DMUON_MODE_FROM_PLAN, DMUON_UNSET);
  EXPECT_EQ(o.mode, DMUON_MODE_FROM_PLAN);
  for (int field : {o.device, o.replicate_async, o.nesterov, o.ns_steps})
    EXPECT_EQ(field, DMUON_UNSET);
  for (double field : {o.lr, o.momentum, o.weight_decay, o.adamw_lr, o.adamw_beta1, o.adamw_beta2,
                       o.adamw_eps, o.adamw_weight_decay})
    EXPECT_TRUE(std::isnan(field));
  EXPECT_TRUE(std::isnan(DMUON_UNSET_REAL));
  dmuon_hyper_params_t h;
  dmuon_hyper_params_init(&h);
  for (double field : {h.lr, h.momentum, h.weight_decay, h.adamw_lr, h.adamw_weight_decay})
    EXPECT_TRUE(std::isnan(field));
}

// options.device defaults to the communicator's device (-1); any other
// negative ordinal is refused before the plugin makes a CUDA call, so this
// runs without a GPU.
TEST(RuntimeCreate, NcclNegativeDeviceIsRefusedBeforeCuda) {
  dmuon_runtime_options_t defaults;
  dmuon_runtime_options_init(&defaults);
  EXPECT_EQ(defaults.device, -1);

  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(planPath("1").c_str(), &plan), DMUON_SUCCESS) << lastError();
  dmuon_runtime_options_t o = mpiOptions();
  o.backend = DMUON_BACKEND_NCCL;
  o.device = -2;
  dmuon_runtime_t rt = nullptr;
  dmuon_status_t st = dmuon_runtime_create(plan, &o, &rt);
  EXPECT_EQ(rt, nullptr);
#ifdef DMUON_TEST_HAVE_NCCL_PLUGIN
  EXPECT_EQ(st, DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("options.device is -2"), std::string::npos) << lastError();
#else
  EXPECT_EQ(st, DMUON_ERROR_UNSUPPORTED);
#endif
  dmuon_plan_destroy(plan);
}

TEST_F(OneRank, BindingErrorsNameTheParam) {
  std::vector<float> v(7);
  EXPECT_EQ(dmuon_runtime_bind_param(rt, "nope.weight", v.data(), 7), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("no param named 'nope.weight'"), std::string::npos) << err();
  EXPECT_EQ(dmuon_runtime_bind_param(rt, "layers.0.fc1.weight", v.data(), 7),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("got 7 values but the plan's shape has 2048"), std::string::npos) << err();
  EXPECT_EQ(dmuon_runtime_pre_forward(rt, 0), DMUON_ERROR_INVALID_STATE);
  EXPECT_NE(err().find("is not bound"), std::string::npos) << err();
}

TEST_F(OneRank, CallsOutOfOrderAreRefusedAndTheRuntimeStaysUsable) {
  bindAll(0.01f);
  const int n = dmuon_plan_num_hook_groups(plan);
  ASSERT_GT(n, 1);
  EXPECT_EQ(dmuon_runtime_step(rt), DMUON_ERROR_INVALID_STATE);
  EXPECT_EQ(dmuon_runtime_pre_forward(rt, n), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("out of range"), std::string::npos) << err();
  void *view = nullptr;
  EXPECT_EQ(dmuon_runtime_param_view(rt, indexOf("layers.0.fc1.weight"), &view),
            DMUON_ERROR_INVALID_STATE);

  int index = -1;
  ASSERT_EQ(dmuon_plan_find_param(plan, "layers.0.fc1.weight", &index), DMUON_SUCCESS);
  dmuon_param_info_t info = versioned<dmuon_param_info_t>(DMUON_PARAM_INFO_VERSION);
  ASSERT_EQ(dmuon_plan_param_info(plan, index, &info), DMUON_SUCCESS);
  const int g0 = info.hook_group; // layers.0 (the embedding's group comes first)
  ASSERT_EQ(dmuon_runtime_pre_forward(rt, g0), DMUON_SUCCESS) << err();
  EXPECT_EQ(dmuon_runtime_pre_forward(rt, g0), DMUON_ERROR_INVALID_STATE);
  EXPECT_NE(err().find("called twice"), std::string::npos) << err();
  EXPECT_EQ(dmuon_runtime_param_view(rt, indexOf("layers.0.fc1.weight"), &view), DMUON_SUCCESS)
      << err();
  EXPECT_FLOAT_EQ(static_cast<float *>(view)[0], 0.01f);
  EXPECT_EQ(dmuon_runtime_pre_backward(rt, g0), DMUON_ERROR_INVALID_STATE);
  for (int g = 0; g < n; ++g) {
    if (g != g0) {
      ASSERT_EQ(dmuon_runtime_pre_forward(rt, g), DMUON_SUCCESS) << err();
    }
    ASSERT_EQ(dmuon_runtime_post_forward(rt, g), DMUON_SUCCESS) << err();
  }
  ASSERT_EQ(dmuon_runtime_pre_backward(rt, n - 1), DMUON_SUCCESS) << err();
  ASSERT_EQ(dmuon_runtime_post_backward(rt, n - 1), DMUON_SUCCESS) << err();
  EXPECT_EQ(dmuon_runtime_step(rt), DMUON_ERROR_INVALID_STATE);
  EXPECT_NE(err().find("before post_backward of hook group"), std::string::npos) << err();
  for (int g = n - 2; g >= 0; --g) {
    ASSERT_EQ(dmuon_runtime_pre_backward(rt, g), DMUON_SUCCESS) << err();
    ASSERT_EQ(dmuon_runtime_post_backward(rt, g), DMUON_SUCCESS) << err();
  }
  EXPECT_EQ(dmuon_runtime_step(rt), DMUON_SUCCESS) << err();
  EXPECT_EQ(dmuon_runtime_bind_param(rt, "layers.0.fc1.weight", nullptr, 0),
            DMUON_ERROR_INVALID_ARGUMENT);
}

TEST(RuntimeCreate, AVersion1OptionsStructTakesTheNewDefaults) {
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(planPath("1").c_str(), &plan), DMUON_SUCCESS) << lastError();
  dmuon_runtime_options_t o = mpiOptions();
  o.version = 1;
  o.struct_size = offsetof(dmuon_runtime_options_t, accumulation);
  o.accumulation = static_cast<dmuon_accumulation_t>(99); // beyond a v1 struct: never read
  dmuon_runtime_t rt = nullptr;
  EXPECT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_SUCCESS) << lastError();
  dmuon_runtime_destroy(rt);
  o.struct_size -= 8; // shorter than any version
  EXPECT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_ERROR_INVALID_ARGUMENT);
  o = mpiOptions();
  o.clip_policy = static_cast<dmuon_clip_policy_t>(7);
  EXPECT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("options.clip_policy 7"), std::string::npos) << lastError();
  o = mpiOptions();
  o.max_grad_norm = -1;
  EXPECT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("options.max_grad_norm"), std::string::npos) << lastError();
  dmuon_plan_destroy(plan);
}

TEST_F(OneRank, TrainingLoopCallsCheckTheirArguments) {
  bindAll(0.01f);
  dmuon_grad_norm_t norm{};
  EXPECT_EQ(dmuon_runtime_grad_norm(rt, &norm), DMUON_ERROR_INVALID_ARGUMENT); // no size
  norm.struct_size = sizeof norm;
  norm.version = DMUON_GRAD_NORM_VERSION;
  EXPECT_EQ(dmuon_runtime_grad_norm(rt, &norm), DMUON_ERROR_INVALID_STATE);
  EXPECT_NE(err().find("before any backward"), std::string::npos) << err();
  EXPECT_EQ(dmuon_runtime_set_param_group_scale(rt, "nothing.*", 1, 1),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("no param matches 'nothing.*'"), std::string::npos) << err();
  EXPECT_EQ(dmuon_runtime_set_param_group_scale(rt, "layers.*", -1, 1),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dmuon_runtime_set_param_group_scale(rt, "layers.*.fc1.*", 0.5, 1), DMUON_SUCCESS);
  dmuon_hyper_params_t h;
  dmuon_hyper_params_init(&h);
  h.momentum = 1.0;
  EXPECT_EQ(dmuon_runtime_set_hyper_params(rt, &h), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("momentum=1"), std::string::npos) << err();
  h.momentum = 0.9;
  EXPECT_EQ(dmuon_runtime_set_hyper_params(rt, &h), DMUON_SUCCESS) << err();
  dmuon_hyper_params_t got;
  dmuon_hyper_params_init(&got);
  ASSERT_EQ(dmuon_runtime_get_hyper_params(rt, &got), DMUON_SUCCESS);
  EXPECT_FLOAT_EQ(static_cast<float>(got.momentum), 0.9f);
  EXPECT_FLOAT_EQ(static_cast<float>(got.soap_lr), 3e-3f); // the plan's (version 2 fields)

  // A host built against version 1 of the struct (no SOAP or Shampoo rates):
  // accepted, and get writes nothing past its size.
  struct {
    dmuon_hyper_params_t h;
    unsigned char canary[64];
  } v1;
  std::memset(&v1, 0xA5, sizeof v1);
  v1.h.struct_size = offsetof(dmuon_hyper_params_t, soap_lr);
  v1.h.version = 1;
  v1.h.lr = 0.01;
  v1.h.momentum = v1.h.weight_decay = v1.h.adamw_lr = v1.h.adamw_weight_decay = DMUON_UNSET_REAL;
  EXPECT_EQ(dmuon_runtime_set_hyper_params(rt, &v1.h), DMUON_SUCCESS) << err();
  std::memset(reinterpret_cast<unsigned char *>(&v1.h) + offsetof(dmuon_hyper_params_t, lr), 0xA5,
              sizeof v1 - offsetof(dmuon_hyper_params_t, lr));
  ASSERT_EQ(dmuon_runtime_get_hyper_params(rt, &v1.h), DMUON_SUCCESS) << err();
  EXPECT_FLOAT_EQ(static_cast<float>(v1.h.lr), 0.01f);
  EXPECT_EQ(v1.h.struct_size, offsetof(dmuon_hyper_params_t, soap_lr));
  const unsigned char *past =
      reinterpret_cast<const unsigned char *>(&v1.h) + offsetof(dmuon_hyper_params_t, soap_lr);
  for (size_t k = 0; k < sizeof v1 - offsetof(dmuon_hyper_params_t, soap_lr); ++k)
    ASSERT_EQ(past[k], 0xA5) << "get wrote byte " << k << " past a version-1 struct";
  ASSERT_EQ(dmuon_runtime_get_hyper_params(rt, &got), DMUON_SUCCESS);
  EXPECT_FLOAT_EQ(static_cast<float>(got.soap_lr), 3e-3f); // left as it was
  EXPECT_FLOAT_EQ(static_cast<float>(got.momentum), 0.9f);
  v1.h.version = 3;
  EXPECT_EQ(dmuon_runtime_set_hyper_params(rt, &v1.h), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("dmuon_hyper_params_init"), std::string::npos) << err();
  // Version 2 with version 1's size: each version has its own minimum size.
  v1.h.version = 2;
  EXPECT_EQ(dmuon_runtime_set_hyper_params(rt, &v1.h), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("set_hyper_params: params has struct_size " +
                       std::to_string(offsetof(dmuon_hyper_params_t, soap_lr)) +
                       " and version 2; initialize it with dmuon_hyper_params_init (version 2)"),
            std::string::npos)
      << err();
  EXPECT_EQ(dmuon_runtime_get_hyper_params(rt, &v1.h), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("get_hyper_params: out has struct_size"), std::string::npos) << err();

  // A micro-batch declared not last: the step waits for the last one.
  const int n = dmuon_plan_num_hook_groups(plan);
  ASSERT_EQ(dmuon_runtime_begin_micro_batch(rt, 0), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_runtime_pre_forward(rt, 0), DMUON_SUCCESS) << err();
  EXPECT_EQ(dmuon_runtime_begin_micro_batch(rt, 1), DMUON_ERROR_INVALID_STATE);
  for (int g = 0; g < n; ++g) {
    if (g > 0) {
      ASSERT_EQ(dmuon_runtime_pre_forward(rt, g), DMUON_SUCCESS) << err();
    }
    ASSERT_EQ(dmuon_runtime_post_forward(rt, g), DMUON_SUCCESS) << err();
  }
  for (int g = n - 1; g >= 0; --g) {
    ASSERT_EQ(dmuon_runtime_pre_backward(rt, g), DMUON_SUCCESS) << err();
    ASSERT_EQ(dmuon_runtime_post_backward(rt, g), DMUON_SUCCESS) << err();
  }
  EXPECT_EQ(dmuon_runtime_step(rt), DMUON_ERROR_INVALID_STATE);
  EXPECT_NE(err().find("declared not the last"), std::string::npos) << err();
  // The last micro-batch, then the step; a third forward before it is refused.
  ASSERT_NO_FATAL_FAILURE(runAllHooks(rt, n));
  EXPECT_EQ(dmuon_runtime_pre_forward(rt, 0), DMUON_ERROR_INVALID_STATE);
  EXPECT_NE(err().find("after the step's last micro-batch"), std::string::npos) << err();
  EXPECT_EQ(dmuon_runtime_step(rt), DMUON_SUCCESS) << err();
  EXPECT_EQ(dmuon_runtime_grad_norm(rt, &norm), DMUON_SUCCESS) << err();
  EXPECT_TRUE(norm.finite);
  int64_t applied = -1, skipped = -1;
  ASSERT_EQ(dmuon_runtime_step_counts(rt, &applied, &skipped), DMUON_SUCCESS);
  EXPECT_EQ(applied, 1);
  EXPECT_EQ(skipped, 0);
}

TEST_F(OneRank, OneStepEqualsTheKernelOnTheGivenGradient) {
  const char *name = "layers.1.fc2.weight"; // [32, 64]
  int index;
  ASSERT_EQ(dmuon_plan_find_param(plan, name, &index), DMUON_SUCCESS);
  dmuon_param_info_t info = versioned<dmuon_param_info_t>(DMUON_PARAM_INFO_VERSION);
  ASSERT_EQ(dmuon_plan_param_info(plan, index, &info), DMUON_SUCCESS);
  std::vector<float> init(info.numel), grad(info.numel);
  for (int64_t k = 0; k < info.numel; ++k) {
    init[k] = std::sin(0.1f * k);
    grad[k] = std::cos(0.37f * k);
  }
  bindAll(0.0f);
  ASSERT_EQ(dmuon_runtime_bind_param(rt, name, init.data(), info.numel), DMUON_SUCCESS);

  const int n = dmuon_plan_num_hook_groups(plan);
  for (int g = 0; g < n; ++g) {
    ASSERT_EQ(dmuon_runtime_pre_forward(rt, g), DMUON_SUCCESS) << err();
    ASSERT_EQ(dmuon_runtime_post_forward(rt, g), DMUON_SUCCESS) << err();
  }
  for (int g = n - 1; g >= 0; --g) {
    ASSERT_EQ(dmuon_runtime_pre_backward(rt, g), DMUON_SUCCESS) << err();
    if (g == info.hook_group) {
      float *gv = nullptr;
      ASSERT_EQ(dmuon_runtime_grad_view(rt, index, &gv), DMUON_SUCCESS) << err();
      std::copy(grad.begin(), grad.end(), gv);
    }
    ASSERT_EQ(dmuon_runtime_post_backward(rt, g), DMUON_SUCCESS) << err();
  }
  ASSERT_EQ(dmuon_runtime_finish_backward(rt), DMUON_SUCCESS) << err();
  dmuon_param_state_t st = versioned<dmuon_param_state_t>(DMUON_PARAM_STATE_VERSION);
  ASSERT_EQ(dmuon_runtime_param_state(rt, name, &st), DMUON_SUCCESS);
  EXPECT_TRUE(st.is_owner && st.has_owned_data && st.has_reduced_grad && st.has_momentum);
  ASSERT_EQ(dmuon_runtime_step(rt), DMUON_SUCCESS) << err();
  ASSERT_EQ(dmuon_runtime_param_state(rt, name, &st), DMUON_SUCCESS);
  EXPECT_FALSE(st.has_reduced_grad);

  std::vector<float> expect = init, momentum(info.numel, 0.0f);
  dmuon::kernels::NsWorkspace ws;
  dmuon::kernels::muonStep(expect.data(), momentum.data(), grad.data(), 1, info.shape[0],
                           info.shape[1], dmuon::kernels::MuonHyper{}, ws);
  std::vector<float> got(info.numel);
  ASSERT_EQ(dmuon_runtime_gather_param(rt, name, got.data(), info.numel), DMUON_SUCCESS) << err();
  EXPECT_EQ(got, expect); // same kernel, same inputs: bit-identical
  EXPECT_GT(dmuon_runtime_ns_flops(rt), 0.0);
}

// Every param on AdamW: the plan has no hook groups, so there is no
// pre_forward to start training with; the first step does, once every param
// is bound, and computes the AdamW kernel on the given gradient.
// Host-routed params are the host's: binding them is accepted and ignored,
// the runtime has no views of them, and the Muon params still train.
TEST(HostRoute, TheRuntimeLeavesHostParamsAlone) {
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(DMUON_HOST_PLAN, &plan), DMUON_SUCCESS) << lastError();
  dmuon_runtime_options_t o = mpiOptions();
  dmuon_runtime_t rt = nullptr;
  ASSERT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_SUCCESS) << lastError();
  auto err = [&] { return std::string(dmuon_runtime_last_error(rt)); };
  int hostParams = 0;
  for (int i = 0; i < dmuon_plan_num_params(plan); ++i) {
    dmuon_param_info_t info = versioned<dmuon_param_info_t>(DMUON_PARAM_INFO_VERSION);
    ASSERT_EQ(dmuon_plan_param_info(plan, i, &info), DMUON_SUCCESS);
    dmuon_param_route_t route{};
    route.struct_size = sizeof route;
    route.version = DMUON_PARAM_ROUTE_VERSION;
    ASSERT_EQ(dmuon_plan_param_route(plan, i, &route), DMUON_SUCCESS);
    EXPECT_EQ(route.route, info.role == DMUON_ROLE_MUON ? DMUON_ROUTE_OWNER : DMUON_ROUTE_HOST);
    if (route.route != DMUON_ROUTE_HOST) {
      std::vector<float> v(info.numel, 0.01f);
      ASSERT_EQ(dmuon_runtime_bind_param(rt, info.name, v.data(), info.numel), DMUON_SUCCESS);
      continue;
    }
    ++hostParams;
    EXPECT_EQ(info.hook_group, -1) << info.name;
    void *view = nullptr;
    EXPECT_EQ(dmuon_runtime_param_view(rt, i, &view), DMUON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(err().find("travels the host route"), std::string::npos) << err();
    float *grad = nullptr;
    EXPECT_EQ(dmuon_runtime_grad_view(rt, i, &grad), DMUON_ERROR_INVALID_ARGUMENT);
  }
  EXPECT_GT(hostParams, 0);
  // Every param the runtime holds is bound: the hooks and a step run.
  const int n = dmuon_plan_num_hook_groups(plan);
  ASSERT_NO_FATAL_FAILURE(runAllHooks(rt, n));
  EXPECT_EQ(dmuon_runtime_step(rt), DMUON_SUCCESS) << err();
  dmuon_memory_report_t mem{};
  mem.struct_size = sizeof mem;
  mem.version = DMUON_MEMORY_REPORT_VERSION;
  ASSERT_EQ(dmuon_runtime_memory(rt, &mem), DMUON_SUCCESS) << err();
  EXPECT_EQ(mem.values.peak, 0u); // nothing of the host params
  EXPECT_EQ(mem.adam_moments.peak, 0u);
  EXPECT_GT(mem.masters.peak, 0u);
  dmuon_runtime_destroy(rt);
  dmuon_plan_destroy(plan);
}

TEST(AllAdamW, StepsWithoutHookGroups) {
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(DMUON_ADAMW_PLAN, &plan), DMUON_SUCCESS) << lastError();
  ASSERT_EQ(dmuon_plan_num_hook_groups(plan), 0);
  dmuon_runtime_options_t o = mpiOptions();
  o.adamw_lr = 0.01;
  dmuon_runtime_t rt = nullptr;
  ASSERT_EQ(dmuon_runtime_create(plan, &o, &rt), DMUON_SUCCESS) << lastError();
  auto err = [&] { return std::string(dmuon_runtime_last_error(rt)); };
  EXPECT_EQ(dmuon_runtime_step(rt), DMUON_ERROR_INVALID_STATE);
  EXPECT_NE(err().find("step: param"), std::string::npos) << err();
  EXPECT_NE(err().find("is not bound"), std::string::npos) << err();

  const char *name = "layers.1.fc2.weight";
  std::vector<float> init, grad;
  int index = -1;
  for (int i = 0; i < dmuon_plan_num_params(plan); ++i) {
    dmuon_param_info_t info = versioned<dmuon_param_info_t>(DMUON_PARAM_INFO_VERSION);
    ASSERT_EQ(dmuon_plan_param_info(plan, i, &info), DMUON_SUCCESS);
    ASSERT_EQ(info.role, DMUON_ROLE_ADAMW);
    std::vector<float> v(info.numel);
    for (int64_t k = 0; k < info.numel; ++k)
      v[k] = std::sin(0.1f * k);
    ASSERT_EQ(dmuon_runtime_bind_param(rt, info.name, v.data(), info.numel), DMUON_SUCCESS);
    if (std::string(info.name) == name) {
      index = i;
      init = v;
      grad.resize(v.size());
      for (size_t k = 0; k < grad.size(); ++k)
        grad[k] = std::cos(0.37f * k);
    }
  }
  ASSERT_FALSE(init.empty());
  float *gv = nullptr;
  ASSERT_EQ(dmuon_runtime_grad_view(rt, index, &gv), DMUON_SUCCESS) << err();
  std::copy(grad.begin(), grad.end(), gv);
  ASSERT_EQ(dmuon_runtime_step(rt), DMUON_SUCCESS) << err();

  std::vector<float> expect = init, m(init.size()), v(init.size()), got(init.size());
  dmuon::kernels::AdamWHyper h;
  h.lr = 0.01f;
  dmuon::kernels::adamwStep(expect.data(), m.data(), v.data(), grad.data(),
                            static_cast<int64_t>(expect.size()), 1, h);
  ASSERT_EQ(dmuon_runtime_gather_param(rt, name, got.data(), static_cast<int64_t>(got.size())),
            DMUON_SUCCESS)
      << err();
  EXPECT_EQ(got, expect); // same kernel, same inputs: bit-identical
  // Training has started: binding is refused as after any first step.
  EXPECT_EQ(dmuon_runtime_bind_param(rt, name, init.data(), static_cast<int64_t>(init.size())),
            DMUON_ERROR_INVALID_STATE);
  dmuon_runtime_destroy(rt);
  dmuon_plan_destroy(plan);
}

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  MPI_Init(&argc, &argv);
  int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
