// The C ABI's plan calls on one rank: loading errors (each its own
// message), what a plan says of its mesh and stages, and the output structs'
// size and version checks.
#include "RuntimeTestSupport.h"
#include "dmuon/dmuon.h"
#include "dmuon/plan_generated.h"
#include "plan/PlanFile.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

dmuon_status_t loadBuffer(const std::vector<uint8_t> &bytes, dmuon_plan_t *plan) {
  return dmuon_plan_load_buffer(bytes.data(), bytes.size(), plan);
}

} // namespace

TEST(PlanLoad, MissingFileNamesThePath) {
  dmuon_plan_t plan = nullptr;
  EXPECT_EQ(dmuon_plan_load_file("/nonexistent/x.plan", &plan), DMUON_ERROR_IO);
  EXPECT_EQ(plan, nullptr);
  EXPECT_NE(lastError().find("'/nonexistent/x.plan'"), std::string::npos) << lastError();
}

// A plan of two pipeline stages loads, and says which stage holds what:
// the tiny model's first layers and embedding on stage 0, the rest and the
// head on stage 1; rank r of pp=2 is stage r.
TEST(PlanLoad, APipelinePlanLoadsAndNamesEachStage) {
  const std::vector<uint8_t> bytes = readBytes(DMUON_PP_PLAN);
  ASSERT_GT(bytes.size(), 100u);
  EXPECT_EQ(dmuon::planfile::verifyPlan(bytes.data(), bytes.size(), true), "");
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(loadBuffer(bytes, &plan), DMUON_SUCCESS) << lastError();
  EXPECT_EQ(dmuon_plan_num_stages(plan), 2);
  for (int rank : {0, 1}) {
    int stage = -1;
    ASSERT_EQ(dmuon_plan_rank_stage(plan, rank, &stage), DMUON_SUCCESS) << lastError();
    EXPECT_EQ(stage, rank);
  }
  int first = -1, last = -1, seen[2] = {0, 0}, previous = 0;
  const int n = dmuon_plan_num_params(plan);
  ASSERT_EQ(dmuon_plan_param_stage(plan, 0, &first), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_plan_param_stage(plan, n - 1, &last), DMUON_SUCCESS);
  EXPECT_EQ(first, 0);
  EXPECT_EQ(last, 1);
  for (int i = 0; i < n; ++i) {
    int stage = -1;
    ASSERT_EQ(dmuon_plan_param_stage(plan, i, &stage), DMUON_SUCCESS);
    ASSERT_TRUE(stage == 0 || stage == 1);
    EXPECT_GE(stage, previous) << "stages follow model order";
    previous = stage;
    ++seen[stage];
  }
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  for (int g = 0; g < dmuon_plan_num_hook_groups(plan); ++g) {
    int stage = -1;
    ASSERT_EQ(dmuon_plan_hook_group_stage(plan, g, &stage), DMUON_SUCCESS);
    EXPECT_TRUE(stage == 0 || stage == 1);
  }
  dmuon_plan_destroy(plan);
}

TEST(PlanLoad, TruncatedFlippedNewerMajorEachHaveTheirOwnMessage) {
  std::vector<uint8_t> good = readBytes(planPath("1"));
  ASSERT_GT(good.size(), 100u);
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(loadBuffer(good, &plan), DMUON_SUCCESS) << lastError();
  dmuon_plan_destroy(plan);

  std::vector<uint8_t> truncated(good.begin(), good.begin() + good.size() / 2);
  EXPECT_EQ(loadBuffer(truncated, &plan), DMUON_ERROR_INVALID_PLAN);
  std::string truncMsg = lastError();

  // A flipped character of a name: the buffer still parses, the
  // fingerprint no longer matches.
  std::vector<uint8_t> flipped = good;
  const std::string name = "fc1.weight";
  auto at = std::search(flipped.begin(), flipped.end(), name.begin(), name.end());
  ASSERT_NE(at, flipped.end());
  *at ^= 0x01;
  EXPECT_EQ(loadBuffer(flipped, &plan), DMUON_ERROR_INVALID_PLAN);
  std::string flipMsg = lastError();

  std::vector<uint8_t> newer = good;
  ASSERT_TRUE(dmuon::plan::GetMutablePlan(newer.data())->mutate_format_major(2));
  ASSERT_TRUE(dmuon::planfile::stampFingerprint(newer.data(), newer.size()));
  EXPECT_EQ(loadBuffer(newer, &plan), DMUON_ERROR_INVALID_PLAN);
  std::string newerMsg = lastError();

  EXPECT_NE(newerMsg.find("newer than this reader"), std::string::npos) << newerMsg;
  EXPECT_NE(truncMsg, flipMsg);
  EXPECT_NE(truncMsg, newerMsg);
  EXPECT_NE(flipMsg, newerMsg);
}

TEST(PlanInfo, MeshOfAnHsdpPlan) {
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(planPath("2x4").c_str(), &plan), DMUON_SUCCESS) << lastError();
  dmuon_mesh_info_t m = versioned<dmuon_mesh_info_t>(DMUON_MESH_INFO_VERSION);
  ASSERT_EQ(dmuon_plan_mesh(plan, &m), DMUON_SUCCESS);
  EXPECT_EQ(m.ndim, 2);
  EXPECT_STREQ(m.dim_names[0], "dp_replicate");
  EXPECT_EQ(m.dim_sizes[1], 4);
  EXPECT_EQ(m.shard_dim, 1);
  EXPECT_EQ(m.replicate_dim, 0);
  EXPECT_EQ(m.num_shards * m.num_replicas, 8);
  EXPECT_EQ(m.world_size, 8);
  EXPECT_EQ(dmuon_plan_mesh(plan, nullptr), DMUON_ERROR_INVALID_ARGUMENT);
  dmuon_plan_destroy(plan);
}

// A plan without a pp dim has one stage: every rank, param and hook group
// is stage 0; out-of-range indices and null outputs are refused by name.
TEST(PlanInfo, APlanWithoutStagesHasOne) {
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(planPath("2x4").c_str(), &plan), DMUON_SUCCESS) << lastError();
  EXPECT_EQ(dmuon_plan_num_stages(plan), 1);
  int stage = -1;
  for (int rank : {0, 7}) {
    ASSERT_EQ(dmuon_plan_rank_stage(plan, rank, &stage), DMUON_SUCCESS) << lastError();
    EXPECT_EQ(stage, 0);
  }
  stage = -1;
  ASSERT_EQ(dmuon_plan_param_stage(plan, dmuon_plan_num_params(plan) - 1, &stage),
            DMUON_SUCCESS);
  EXPECT_EQ(stage, 0);
  stage = -1;
  ASSERT_EQ(dmuon_plan_hook_group_stage(plan, 0, &stage), DMUON_SUCCESS);
  EXPECT_EQ(stage, 0);
  EXPECT_EQ(dmuon_plan_rank_stage(plan, 8, &stage), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lastError()).find("rank 8 is out of range"), std::string::npos)
      << lastError();
  EXPECT_EQ(dmuon_plan_param_stage(plan, -1, &stage), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dmuon_plan_hook_group_stage(plan, dmuon_plan_num_hook_groups(plan), &stage),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dmuon_plan_rank_stage(plan, 0, nullptr), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dmuon_plan_num_stages(nullptr), 0);
  dmuon_plan_destroy(plan);
}

// Output structs carry their size and version: a caller that did not set
// them (or set a newer version) is refused, and nothing is written.
TEST(PlanInfo, OutputStructsMustCarryTheirSizeAndVersion) {
  dmuon_plan_t plan = nullptr;
  ASSERT_EQ(dmuon_plan_load_file(planPath("1").c_str(), &plan), DMUON_SUCCESS) << lastError();
  dmuon_param_info_t raw{};
  EXPECT_EQ(dmuon_plan_param_info(plan, 0, &raw), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("param_info: out_info has struct_size 0 and version 0"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(raw.name, nullptr);
  dmuon_param_info_t newer = versioned<dmuon_param_info_t>(99);
  EXPECT_EQ(dmuon_plan_param_info(plan, 0, &newer), DMUON_ERROR_INVALID_ARGUMENT);
  dmuon_param_info_t small = versioned<dmuon_param_info_t>(DMUON_PARAM_INFO_VERSION);
  small.struct_size -= 8;
  EXPECT_EQ(dmuon_plan_param_info(plan, 0, &small), DMUON_ERROR_INVALID_ARGUMENT);
  dmuon_mesh_info_t mesh{};
  EXPECT_EQ(dmuon_plan_mesh(plan, &mesh), DMUON_ERROR_INVALID_ARGUMENT);
  // A good one is filled and keeps its header.
  dmuon_param_info_t info = versioned<dmuon_param_info_t>(DMUON_PARAM_INFO_VERSION);
  ASSERT_EQ(dmuon_plan_param_info(plan, 0, &info), DMUON_SUCCESS) << lastError();
  EXPECT_EQ(info.struct_size, sizeof info);
  EXPECT_EQ(info.version, static_cast<uint32_t>(DMUON_PARAM_INFO_VERSION));
  EXPECT_STREQ(info.name, "embed.weight");
  dmuon_plan_destroy(plan);
}
