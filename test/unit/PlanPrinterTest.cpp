// The printed forms of a plan (text, JSON, summary), and that the printers
// survive indices a plan should never hold.
#include "PlanTestModel.h"
#include "dmuon/plan_version.h"
#include "plan/PlanFile.h"
#include "plan/print/PlanPrinter.h"
#include "common/RankRows.h"
#include "common/SlotLoads.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <string>
#include <vector>

using namespace dmuon;
using namespace dmuon::plan_test;

namespace {

TEST(PlanPrinter, TextForm) {
  std::vector<uint8_t> b = writePlan(makeModel());
  const plan::Plan *p = plan::GetPlan(b.data());
  std::string t = planfile::printText(*p);
  char fp[32];
  std::snprintf(fp, sizeof fp, "0x%016llx", static_cast<unsigned long long>(p->fingerprint()));
  std::string expectHead =
      "; dmuon plan 1.9 stage=complete producer=dmuonc " DMUON_VERSION_STRING "\n"
      "; fingerprint " + std::string(fp) + "\n"
      "source: tiny.toml\n"
      "model: tiny\n"
      "mesh: dp_replicate=2,dp_shard=4,tp=1 world_size=8 shards=4 replicas=2 slots=8\n"
      "options: mode=z3 replicate_async=true small_param_threshold=5000000 "
      "hook_boundary=default muon_include=none muon_exclude=none alignment=256 "
      "cost_model=flops qk_clip_tau=100 adamw_route=auto sharded_threshold=500000\n"
      "optimizer: lr=0.02 momentum=0.95 nesterov=true weight_decay=0 ns_steps=5 "
      "ns_coefficients=original lr_scale=original adamw_lr=0.001 adamw_betas=0.9,0.999 "
      "adamw_eps=0.00000001 adamw_weight_decay=0\n"
      "params:\n"
      "param layers.0.q.weight shape=[64,64] dtype=f32 placements=[Replicate,Replicate,Replicate] "
      "role=muon reason=default_matrix matrix=1x64x64 group=no_comm layer=layers.0 unit=0 "
      "owner=5 slot=(1,1) cost=5242880 form=three_gemm hook=layers.0 offset=0 bytes=16384 reduce_offset=0 "
      "reduce_bytes=16384\n"
      "param layers.0.norm.weight shape=[64] dtype=bf16 placements=[Replicate,Replicate,Replicate] "
      "role=adamw reason=default_vector route=replicated route_reason=policy bytes=256\n"
      "param layers.0.up.weight shape=[128,64] dtype=f32 "
      "placements=[Replicate,Replicate,Shard(0)] "
      "source=onnx::MatMul_7 note=\"from node /layers.0/up/MatMul\" role=muon "
      "reason=default_matrix matrix=1x128x64 group=comm gather=tp:0 compute=0 "
      "layer=layers.0 unit=1 owner=2 "
      "slot=(2,0) cost=7340032.5 form=three_gemm hook=layers.0 offset=16384 bytes=32768 "
      "reduce_offset=16384 reduce_bytes=32768\n"
      "units:\n"
      "unit 0 layers.0.q.weight layer=layers.0 cost=5242880 slot=5 params=1\n"
      "unit 1 layers.0.up.weight layer=layers.0 cost=7340032.5 slot=2 params=1\n"
      "sharding_groups:\n"
      "no_comm: 1 params\n"
      "  no_comm layers.0.q.weight\n"
      "comm Replicate,Replicate,Shard(0) params=[layers.0.up.weight] "
      "replicate_groups=[[0,4],[1,5],[2,6],[3,7]]\n"
      "hook_groups:\n"
      "hook layers.0 params=2 buffer_bytes=49152 reduce_buffer_bytes=49152\n"
      "  segment owner=2 slot=(2,0) offset=16384 bytes=32768 reduce_offset=16384 "
      "reduce_bytes=32768 params=[layers.0.up.weight]\n"
      "  segment owner=5 slot=(1,1) offset=0 bytes=16384 reduce_offset=0 reduce_bytes=16384 "
      "params=[layers.0.q.weight]\n"
      "stats:\n"
      "slots=8 total_cost=12582912.5 lower_bound=7340032.5 max_load=7340032.5 "
      "imbalance=1.0000 lpt_max_load=7340032.5 refinement_moves=0 layer_rule_violations=0\n"
      "slot 0 (0,0) rank=0 load=0\n";
  EXPECT_EQ(t.substr(0, expectHead.size()), expectHead) << t;
  EXPECT_TRUE(contains(t, "slot 5 (1,1) rank=5 load=5242880\n")) << t;
  EXPECT_TRUE(contains(t, "rank 5 owned_params=0 owned_elements=0 master_bytes=16384 "
                          "momentum_bytes=0 peak_buffer_bytes=0 ns_flops=5242880 "
                          "broadcast_send=0 broadcast_recv=0 reduce_send=0 reduce_recv=0 "
                          "replicate_send=0 replicate_recv=0 allreduce=256 gather_send=0 "
                          "gather_recv=0 scatter_send=0 scatter_recv=0 allgather_send=0 allgather_recv=0 "
                     "reduce_scatter_send=0 reduce_scatter_recv=0 value_bytes=0 adam_moment_bytes=0 "
                     "grad_bytes=0 memory_bytes=0\n"))
      << t;
}

TEST(PlanPrinter, StopAfterSelectOmitsLaterFields) {
  PlanModel m = makeModel();
  m.stage = Stage::select;
  std::vector<uint8_t> b = writePlan(m);
  std::string t = planfile::printText(*plan::GetPlan(b.data()));
  EXPECT_TRUE(contains(t, "; dmuon plan 1.9 stage=select ")) << t;
  EXPECT_TRUE(contains(t, "param layers.0.q.weight shape=[64,64] dtype=f32 "
                          "placements=[Replicate,Replicate,Replicate] role=muon "
                          "reason=default_matrix "
                          "matrix=1x64x64\n"))
      << t;
  EXPECT_FALSE(contains(t, "group=")) << t;
  EXPECT_FALSE(contains(t, "sharding_groups:")) << t;
  EXPECT_FALSE(contains(t, "stats:")) << t;
}

// Checks brace/bracket balance outside strings and that every string is closed.
bool balanced(const std::string &s) {
  std::vector<char> stack;
  bool inString = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      else if (static_cast<unsigned char>(c) < 0x20)
        return false;
      continue;
    }
    if (c == '"')
      inString = true;
    else if (c == '{' || c == '[')
      stack.push_back(c);
    else if (c == '}' || c == ']') {
      if (stack.empty() || stack.back() != (c == '}' ? '{' : '['))
        return false;
      stack.pop_back();
    }
  }
  return !inString && stack.empty();
}

TEST(PlanPrinter, JsonForm) {
  PlanModel m = makeModel();
  m.modelName = "ti\"ny\\\n\x01";
  std::vector<uint8_t> b = writePlan(m);
  std::string j = planfile::printJson(*plan::GetPlan(b.data()));
  EXPECT_TRUE(balanced(j)) << j;
  EXPECT_EQ(j.substr(0, 28), "{\n  \"format_version\": \"1.9\",") << j;
  EXPECT_TRUE(contains(j, "\"model\": \"ti\\\"ny\\\\\\n\\u0001\",")) << j;
  // Top-level key order.
  const char *keys[] = {"\"format_version\"", "\"producer\"", "\"fingerprint\"", "\"stage\"",
                        "\"source\"", "\"model\"", "\"mesh\"", "\"options\"", "\"params\"",
                        "\"units\"", "\"sharding_groups\"", "\"hook_groups\"", "\"stats\""};
  size_t last = 0;
  for (const char *k : keys) {
    size_t at = j.find(std::string("\n  ") + k);
    ASSERT_NE(at, std::string::npos) << k;
    EXPECT_GT(at, last) << k;
    last = at;
  }
  // Param key order for a complete Muon param.
  size_t q = j.find("\"name\": \"layers.0.q.weight\"");
  ASSERT_NE(q, std::string::npos);
  const char *pkeys[] = {"\"shape\": [64, 64]", "\"dtype\": \"f32\"",
                         "\"placements\": [\"Replicate\", \"Replicate\", \"Replicate\"]",
                         "\"local_shape\": [64, 64]", "\"role\": \"muon\"",
                         "\"role_reason\": \"default_matrix\"",
                         "\"matrix\": {\"batch\": 1, \"rows\": 64, \"cols\": 64}",
                         "\"group\": \"no_comm\"", "\"layer\": \"layers.0\"", "\"unit\": 0",
                         "\"owner_rank\": 5", "\"owner_slot\": {\"shard\": 1, \"replicate\": 1}",
                         "\"cost\": 5242880", "\"hook\": \"layers.0\"", "\"offset\": 0",
                         "\"bytes\": 16384", "\"reduce_offset\": 0", "\"reduce_bytes\": 16384"};
  last = q;
  for (const char *k : pkeys) {
    size_t at = j.find(k, last);
    ASSERT_NE(at, std::string::npos) << k << "\n" << j;
    last = at;
  }
  EXPECT_TRUE(contains(j, "\"source_name\": \"onnx::MatMul_7\"")) << j;
  EXPECT_TRUE(contains(j, "\"comm_group\": 0,\n      \"gather\": {\"mesh_dim\": 2, "
                          "\"tensor_dim\": 0, \"compute_index\": 0},"))
      << j;
  EXPECT_TRUE(contains(j, "\"allreduce_bytes\": 256,\n        \"gather_send_bytes\": 0,"))
      << j;
  EXPECT_TRUE(contains(j, "\"fingerprint\": \"0x")) << j;
  EXPECT_TRUE(contains(j, "\"replicate_groups\": [[0, 4], [1, 5], [2, 6], [3, 7]]")) << j;
  EXPECT_TRUE(contains(j, "\"adamw_eps\": 0.00000001")) << j;
  EXPECT_TRUE(contains(j, "\"hook_boundary\": null")) << j;
  EXPECT_EQ(j.back(), '\n');
}

TEST(PlanPrinter, Summary) {
  std::vector<uint8_t> b = writePlan(makeModel());
  std::string s = planfile::printSummary(*plan::GetPlan(b.data()));
  EXPECT_TRUE(contains(s, "model: tiny (tiny.toml)\n")) << s;
  EXPECT_TRUE(contains(s, "params: 3 (2 muon, 12288 elements; 1 adamw, 64 elements)")) << s;
  EXPECT_TRUE(contains(s, "imbalance=1.0000 (optimal)")) << s;
  EXPECT_TRUE(contains(s, "hook groups: 1")) << s;
  EXPECT_TRUE(contains(s, "largest master bytes: 32768")) << s;
}

// Printing an unverified, structurally valid plan with bad indices must not
// crash (dmuonc prints what it just wrote without verifying).
TEST(PlanPrinter, BadIndicesDoNotCrash) {
  PlanModel m = makeModel();
  m.params[0].hookGroup = 42;
  m.noComm = {99};
  m.hookGroups[0].segments[0].params = {-5};
  std::vector<uint8_t> b = writePlan(m);
  const plan::Plan *p = plan::GetPlan(b.data());
  std::string t = planfile::printText(*p);
  EXPECT_TRUE(contains(t, "hook=?")) << t;
  EXPECT_TRUE(contains(t, "  no_comm ?")) << t;
  EXPECT_FALSE(planfile::printJson(*p).empty());
  EXPECT_FALSE(planfile::printSummary(*p).empty());
}

} // namespace
