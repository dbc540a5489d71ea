// The verifier's semantic checks: each case corrupts one field of a written
// plan (through the mutable API, then restamps) and expects the exact message.
#include "PlanTestModel.h"
#include "dmuon/plan_version.h"
#include "plan/PlanFile.h"
#include "plan/print/PlanPrinter.h"
#include "common/RankRows.h"
#include "common/SlotLoads.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <span>
#include <string>
#include <vector>

using namespace dmuon;
using namespace dmuon::plan_test;

namespace {

// A corruption of a written plan (through the mutable API) and what the
// verifier must say of it.
struct Mutation {
  const char *expect;
  bool (*mutate)(plan::Plan &);
};

// Each mutation on a fresh copy of `model`'s plan, restamped: the verifier's
// message contains the mutation's.
void expectEachRefused(const PlanModel &model, std::span<const Mutation> cases) {
  for (const Mutation &c : cases) {
    std::vector<uint8_t> b = writePlan(model);
    ASSERT_TRUE(c.mutate(*mutablePlan(b))) << "field not present for: " << c.expect;
    restamp(b);
    std::string e = verify(b);
    EXPECT_TRUE(contains(e, c.expect)) << "expected: " << c.expect << "\n     got: " << e;
  }
}

TEST(PlanRoundTrip, SemanticChecks) {
  const Mutation cases[] = {
      {"param 'layers.0.q.weight': owner_shard 9 out of range (mesh has 4 shards)",
       [](plan::Plan &p) {
         return p.mutable_params()->GetMutableObject(0)->mutate_owner_shard(9);
       }},
      {"param 'layers.0.q.weight': owner_rank 6 is not the rank 5 of its owner slot (1,1)",
       [](plan::Plan &p) { return p.mutable_params()->GetMutableObject(0)->mutate_owner_rank(6); }},
      {"param 'layers.0.q.weight': owner_rank 8 out of range (world size 8)",
       [](plan::Plan &p) { return p.mutable_params()->GetMutableObject(0)->mutate_owner_rank(8); }},
      {"param 'layers.0.up.weight': unit 2 out of range (plan has 2 units)",
       [](plan::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_unit(2); }},
      {"param 'layers.0.up.weight': hook_group 1 out of range (plan has 1 hook groups)",
       [](plan::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_hook_group(1); }},
      {"param 'layers.0.up.weight': comm_group 3 out of range",
       [](plan::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_comm_group(3); }},
      {"param 'layers.0.up.weight': gather_mesh_dim 3 out of range (mesh has 3 dims)",
       [](plan::Plan &p) {
         return p.mutable_params()->GetMutableObject(2)->mutate_gather_mesh_dim(3);
       }},
      {"param 'layers.0.up.weight': gather_mesh_dim 1 is a data-parallel mesh dim",
       [](plan::Plan &p) {
         return p.mutable_params()->GetMutableObject(2)->mutate_gather_mesh_dim(1);
       }},
      {"param 'layers.0.up.weight': gather_tensor_dim 1 is not the tensor dim its gather mesh dim "
       "2 shards",
       [](plan::Plan &p) {
         return p.mutable_params()->GetMutableObject(2)->mutate_gather_tensor_dim(1);
       }},
      {"param 'layers.0.up.weight': compute_index 1 out of range (gather mesh dim 2 has size 1)",
       [](plan::Plan &p) {
         return p.mutable_params()->GetMutableObject(2)->mutate_compute_index(1);
       }},
      {"param 'layers.0.q.weight': local_shape dim 0 is 48, expected 64 (the largest chunk of "
       "its size 64 over the model-parallel mesh dims that shard it)",
       [](plan::Plan &p) {
         p.mutable_params()->GetMutableObject(0)->mutable_local_shape()->Mutate(0, 48);
         return true;
       }},
      {"mesh world_size is 16 but its dims multiply to 8",
       [](plan::Plan &p) { return p.mutable_mesh()->mutate_world_size(16); }},
      {"mesh dim 'dp_shard' has size 0",
       [](plan::Plan &p) {
         return p.mutable_mesh()->mutable_dims()->GetMutableObject(1)->mutate_size(0);
       }},
      {"mesh num_shards is 3, expected 4",
       [](plan::Plan &p) { return p.mutable_mesh()->mutate_num_shards(3); }},
      {"mesh shard_dim 3 out of range",
       [](plan::Plan &p) { return p.mutable_mesh()->mutate_shard_dim(3); }},
      {"unit 1 'layers.0.up.weight': slot 8 out of range (plan has 8 owner slots)",
       [](plan::Plan &p) { return p.mutable_units()->GetMutableObject(1)->mutate_slot(8); }},
      {"unit 0 'layers.0.q.weight': param index 3 out of range (plan has 3 params)",
       [](plan::Plan &p) {
         p.mutable_units()->GetMutableObject(0)->mutable_params()->Mutate(0, 3);
         return true;
       }},
      {"no_comm: param index -1 out of range",
       [](plan::Plan &p) {
         p.mutable_no_comm()->Mutate(0, -1);
         return true;
       }},
      {"comm group 0 'Replicate,Replicate,Shard(0)': replicate mesh dim 3 out of range",
       [](plan::Plan &p) {
         p.mutable_comm_groups()->GetMutableObject(0)->mutable_replicate_mesh_dims()->Mutate(0, 3);
         return true;
       }},
      {"hook group 0 'layers.0' segment 0: bytes [40000, +32768) lie outside the buffer of "
       "49152 bytes",
       [](plan::Plan &p) {
         return p.mutable_hook_groups()->GetMutableObject(0)->mutable_segments()
             ->GetMutableObject(0)->mutate_offset(40000);
       }},
      {"hook group 0 'layers.0' segment 0: reduce bytes",
       [](plan::Plan &p) {
         return p.mutable_hook_groups()->GetMutableObject(0)->mutable_segments()
             ->GetMutableObject(0)->mutate_reduce_bytes(1 << 20);
       }},
      {"hook group 0 'layers.0' segment 1: owner_replicate 2 out of range",
       [](plan::Plan &p) {
         return p.mutable_hook_groups()->GetMutableObject(0)->mutable_segments()
             ->GetMutableObject(1)->mutate_owner_replicate(2);
       }},
      {"param 'layers.0.up.weight': bytes [16384, +40000) lie outside hook group 'layers.0'",
       [](plan::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_bytes(40000); }},
      {"stats.slots is 7, expected 8",
       [](plan::Plan &p) { return p.mutable_stats()->mutate_slots(7); }},
      {"unknown stage 9",
       [](plan::Plan &p) { return p.mutate_stage(static_cast<plan::Stage>(9)); }},
      {"param 'layers.0.norm.weight': unknown dtype 7",
       [](plan::Plan &p) {
         return p.mutable_params()->GetMutableObject(1)->mutate_dtype(static_cast<plan::DType>(7));
       }},
  };
  expectEachRefused(makeModel(), cases);
}

// QK-Clip (format 1.2): a grouped-query pair (query layers.0.up.weight, 8
// heads of 16 rows; key layers.0.q.weight, 4 heads) round trips, prints,
// and every broken pair is refused with its own message.
TEST(PlanRoundTrip, QkClipPairs) {
  auto model = [] {
    PlanModel m = makeModel();
    m.options.qkClipTau = 50;
    QkClipPair q;
    q.query = 2;
    q.key = 0;
    q.heads = 8;
    q.keyHeads = 4;
    q.headDim = 16;
    m.qkClip.push_back(q);
    return m;
  };
  std::vector<uint8_t> good = writePlan(model());
  ASSERT_EQ(verify(good), "");
  const plan::Plan *p = plan::GetPlan(good.data());
  EXPECT_EQ(p->options()->qk_clip_tau(), 50.0);
  ASSERT_EQ(p->qk_clip()->size(), 1u);
  std::string t = planfile::printText(*p);
  EXPECT_TRUE(contains(t, " qk_clip_tau=50 ")) << t;
  EXPECT_TRUE(contains(t, "qk_clip:\nqk_clip layers.0.up.weight key=layers.0.q.weight heads=8 "
                          "key_heads=4 head_dim=16\nunits:\n"))
      << t;
  std::string j = planfile::printJson(*p);
  EXPECT_TRUE(contains(j, "\"qk_clip_tau\": 50,\n")) << j;
  EXPECT_TRUE(contains(j, "{\"query\": \"layers.0.up.weight\", \"key\": \"layers.0.q.weight\", "
                          "\"heads\": 8, \"key_heads\": 4, \"head_dim\": 16}"))
      << j;

  const Mutation cases[] = {
      {"options.qk_clip_tau is 0",
       [](plan::Plan &pl) { return pl.mutable_options()->mutate_qk_clip_tau(0); }},
      {"qk_clip pair #0: query 3 out of range (plan has 3 params)",
       [](plan::Plan &pl) { return pl.mutable_qk_clip()->GetMutableObject(0)->mutate_query(3); }},
      {"qk_clip pair #0: query and key are both param #2",
       [](plan::Plan &pl) { return pl.mutable_qk_clip()->GetMutableObject(0)->mutate_key(2); }},
      {"qk_clip pair #0: heads 6, key_heads 4, head_dim 16",
       [](plan::Plan &pl) { return pl.mutable_qk_clip()->GetMutableObject(0)->mutate_heads(6); }},
      {"qk_clip pair #0: param 'layers.0.up.weight' has 128 rows, not 8 heads x 8",
       [](plan::Plan &pl) {
         return pl.mutable_qk_clip()->GetMutableObject(0)->mutate_head_dim(8);
       }},
      {"qk_clip pair #0: param 'layers.0.norm.weight' is not a 2-D Muon matrix",
       [](plan::Plan &pl) { return pl.mutable_qk_clip()->GetMutableObject(0)->mutate_key(1); }},
  };
  expectEachRefused(model(), cases);
}

TEST(PlanRoundTrip, SlotLoadCountChecked) {
  PlanModel m = makeModel();
  m.stats.slotLoad.resize(5);
  std::vector<uint8_t> b = writePlan(m);
  EXPECT_TRUE(contains(verify(b),
                       "stats.slot_load runs cover 5 fine slots, expected 8 (num_shards*num_replicas)"))
      << verify(b);
}

TEST(PlanRoundTrip, MuonParamNeedsUnitAfterPartition) {
  PlanModel m = makeModel();
  m.params[0].unit = -1;
  std::vector<uint8_t> b = writePlan(m);
  EXPECT_EQ(verify(b), "param 'layers.0.q.weight' travels the owner route but has no unit");
}

plan::Param *P(plan::Plan &p, int i) { return p.mutable_params()->GetMutableObject(i); }

// Segment i of the one hook group.
plan::Segment *S(plan::Plan &p, int i) {
  return p.mutable_hook_groups()->GetMutableObject(0)->mutable_segments()->GetMutableObject(i);
}

// Complete plans: what the executor dereferences or trusts. Each case
// corrupts one field through the mutable API (then restamps) and expects the
// exact message.
TEST(PlanRoundTrip, CompletePlanChecks) {
  struct Case {
    const char *expect;
    bool (*mutate)(plan::Plan &);
  };
  const Case cases[] = {
      {"param 'layers.0.up.weight': unit 1 'layers.0.up.weight' slot -1 out of range (plan has "
       "8 owner slots)",
       [](plan::Plan &p) { return p.mutable_units()->GetMutableObject(1)->mutate_slot(-1); }},
      {"param 'layers.0.up.weight': owner slot (2,0) is not its unit's slot 6 (2,1)",
       [](plan::Plan &p) { return p.mutable_units()->GetMutableObject(1)->mutate_slot(6); }},
      {"param 'layers.0.q.weight' travels the owner route but has no hook_group",
       [](plan::Plan &p) { return P(p, 0)->mutate_hook_group(-1); }},
      {"param 'layers.0.q.weight' travels the owner route but has no offset (-1)",
       [](plan::Plan &p) { return P(p, 0)->mutate_offset(-1); }},
      {"param 'layers.0.q.weight' travels the owner route but has no reduce_offset (-1)",
       [](plan::Plan &p) { return P(p, 0)->mutate_reduce_offset(-1); }},
      {"param 'layers.0.q.weight': bytes is 16000, expected 16384 (4096 local elements of f32)",
       [](plan::Plan &p) { return P(p, 0)->mutate_bytes(16000); }},
      {"param 'layers.0.q.weight': reduce_bytes is 8192, expected 16384 (4096 local elements "
       "of f32)",
       [](plan::Plan &p) { return P(p, 0)->mutate_reduce_bytes(8192); }},
      {"param 'layers.0.q.weight': local matrix view 1x32x64 has 2048 elements but local_shape "
       "has 4096",
       [](plan::Plan &p) { return P(p, 0)->mutate_local_rows(32); }},
      {"param 'layers.0.q.weight': local matrix view 1x0x64 has a dim below 1 or more than 2^48 "
       "elements",
       [](plan::Plan &p) { return P(p, 0)->mutate_local_rows(0); }},
      {"param 'layers.0.q.weight': matrix view 1x32x64 has 2048 elements but shape has 4096",
       [](plan::Plan &p) { return P(p, 0)->mutate_rows(32); }},
      {"param 'layers.0.q.weight': matrix view 1x1048576x1073741824 has a dim below 1 or more "
       "than 2^48 elements",
       [](plan::Plan &p) {
         return P(p, 0)->mutate_rows(int64_t(1) << 20) && P(p, 0)->mutate_cols(int64_t(1) << 30);
       }},
      {"param 'layers.0.norm.weight': shape has more than 2^48 elements",
       [](plan::Plan &p) {
         P(p, 1)->mutable_shape()->Mutate(0, int64_t(1) << 49);
         return true;
       }},
      // local_shape is held to the chunking rule exactly, even over a zero
      // global dim (which once "divided" any local size).
      {"param 'layers.0.norm.weight': local_shape dim 0 is 562949953421312, expected 0 (the "
       "largest chunk of its size 0 over the model-parallel mesh dims that shard it)",
       [](plan::Plan &p) {
         P(p, 1)->mutable_shape()->Mutate(0, 0);
         P(p, 1)->mutable_local_shape()->Mutate(0, int64_t(1) << 49);
         return true;
       }},
      {"hook group 0 'layers.0' segment 0: owner_rank 3 is not the rank 2 of its owner slot "
       "(2,0)",
       [](plan::Plan &p) { return S(p, 0)->mutate_owner_rank(3); }},
      {"hook group 0 'layers.0' segment 0: param 'layers.0.norm.weight' does not travel the owner route",
       [](plan::Plan &p) {
         S(p, 0)->mutable_params()->Mutate(0, 1);
         return true;
       }},
      {"hook group 0 'layers.0' segment 0: param 'layers.0.q.weight' is owned by slot 5 (1,1), "
       "not the segment's slot 2 (2,0)",
       [](plan::Plan &p) {
         S(p, 0)->mutable_params()->Mutate(0, 0);
         return true;
       }},
      {"hook group 0 'layers.0' segment 1: param 'layers.0.q.weight': bytes [0, +16384) lie "
       "outside the segment's [0, +8192)",
       [](plan::Plan &p) { return S(p, 1)->mutate_bytes(8192); }},
      {"hook group 0 'layers.0' segment 1: param 'layers.0.q.weight': reduce bytes [0, +16384) "
       "lie outside the segment's [0, +8192)",
       [](plan::Plan &p) { return S(p, 1)->mutate_reduce_bytes(8192); }},
  };
  for (const Case &c : cases) {
    std::vector<uint8_t> b = writePlan(makeModel());
    ASSERT_TRUE(c.mutate(*mutablePlan(b))) << "field not present for: " << c.expect;
    restamp(b);
    EXPECT_EQ(verify(b), c.expect);
  }
}

// Complete plans, cases built by rebuilding the model.
TEST(PlanRoundTrip, CompletePlanChecksRebuilt) {
  struct Case {
    const char *expect;
    void (*change)(PlanModel &);
  };
  const Case cases[] = {
      {"options.optimizer.ns_steps is 0 (must be between 1 and 100)",
       [](PlanModel &m) { m.options.optimizer.nsSteps = 0; }},
      {"options.optimizer.ns_steps is 101 (must be between 1 and 100)",
       [](PlanModel &m) { m.options.optimizer.nsSteps = 101; }},
      {"params #0 and #1 are both named 'layers.0.q.weight'",
       [](PlanModel &m) { m.params[1].name = "layers.0.q.weight"; }},
      // 1.6: runs of equal figures. The model's rows give the runs
      // [0,2) [2,3) [3,5) [5,6) [6,8) (the writer merges equal neighbours).
      {"stats.rank_runs is empty, expected runs covering 8 ranks (world size)",
       [](PlanModel &m) { m.stats.ranks.clear(); }},
      {"stats.rank_runs[0] starts at rank 1, expected 0",
       [](PlanModel &m) { m.stats.ranks[0].rank = 1; }},
      {"stats.rank_runs[2] starts at rank 2, not after the previous run's 2",
       [](PlanModel &m) { m.stats.ranks[3].rank = 2; }},
      {"stats.rank_runs[4] starts at rank 9, past the world size 8",
       [](PlanModel &m) { m.stats.ranks[6].rank = 9; }},
      {"param 'layers.0.q.weight': bytes is 16384, expected 8192 (4096 local elements of bf16)",
       [](PlanModel &m) { m.params[0].dtype = DType::bf16; }},
      {"param 'layers.0.up.weight': gathered matrix view 1x64x64 (local_batch x rows x cols) is "
       "not 1 local shards of 8192 elements (gather mesh dim 2)",
       [](PlanModel &m) {
         m.params[2].batch = 2;
         m.params[2].rows = 64;
       }},
      {"param 'layers.0.up.weight': dim 0 of size 128 is not split evenly by its StridedShard "
       "placements (each interleaves equal chunks)",
       [](PlanModel &m) {
         m.params[2].placements[2] = Placement{PlacementKind::strided_shard, 0, 3, "sum"};
       }},
      {"param 'big': AdamW params up to this one have more than 2^48 local elements",
       [](PlanModel &m) {
         m.params.push_back(makeParam("big", {int64_t(1) << 48}, Role::adamw, 3));
       }},
      {"hook group 0 'layers.0' segment 0: param 'layers.0.up.weight' belongs to hook group 1",
       [](PlanModel &m) {
         HookGroup h;
         h.name = "layers.1";
         h.bufferBytes = h.reduceBufferBytes = 49152;
         m.hookGroups.push_back(h);
         m.params[2].hookGroup = 1;
       }},
      {"hook group 0 'layers.0' segment 1: param 'layers.0.q.weight' is listed more than once in "
       "the segments of hook group 0 'layers.0'",
       [](PlanModel &m) { m.hookGroups[0].segments[1].params = {0, 0}; }},
      {"param 'layers.0.q.weight' is in no segment of its hook group 0 'layers.0'",
       [](PlanModel &m) { m.hookGroups[0].segments[1].params.clear(); }},
  };
  for (const Case &c : cases) {
    PlanModel m = makeModel();
    c.change(m);
    EXPECT_EQ(verify(writePlan(m)), c.expect);
  }
}

// Marks a present field of a table absent by zeroing its vtable entry (the
// builder shares identical vtables, so same-shaped siblings lose it too).
bool dropField(const flatbuffers::Table *t, flatbuffers::voffset_t field) {
  if (!t || !t->GetOptionalFieldOffset(field))
    return false;
  uint8_t *vt = const_cast<uint8_t *>(t->GetVTable());
  flatbuffers::WriteScalar<flatbuffers::voffset_t>(vt + field, 0);
  return true;
}

const flatbuffers::Table *table(const void *p) {
  return reinterpret_cast<const flatbuffers::Table *>(p);
}

// Complete plans: every table and vector the executor dereferences is present.
// 1.6: the per-rank figures are runs of equal figures; every rank reads its
// own row, adjacent runs differ, and a plan's minor version says which field
// holds the figures.
TEST(PlanRoundTrip, RankRuns) {
  PlanModel m = makeModel();
  std::vector<uint8_t> b = writePlan(m);
  ASSERT_EQ(verify(b), "");
  const plan::Plan *p = plan::GetPlan(b.data());
  EXPECT_EQ(p->stats()->ranks(), nullptr);
  ASSERT_NE(p->stats()->rank_runs(), nullptr);
  EXPECT_EQ(p->stats()->rank_runs()->size(), 5u);
  const common::RankRows rows(*p);
  EXPECT_TRUE(rows.runs());
  for (int64_t r = 0; r < 8; ++r) {
    const plan::RankFigures *f = rows.ofRank(r);
    ASSERT_NE(f, nullptr) << r;
    EXPECT_EQ(f->master_bytes(), m.stats.ranks[r].masterBytes) << r;
    EXPECT_EQ(f->ns_flops(), m.stats.ranks[r].nsFlops) << r;
  }
  EXPECT_EQ(rows.ofRank(8), nullptr);
  EXPECT_EQ(rows.ofRank(-1), nullptr);
  EXPECT_EQ(rows.first(2), 3);
  EXPECT_EQ(rows.count(2), 2);
  EXPECT_EQ(rows.end(4), 8);

  // Run 1 (rank 2) given run 0's figures.
  std::vector<uint8_t> same = b;
  plan::RankFigures *r1 = mutablePlan(same)->mutable_stats()->mutable_rank_runs()->GetMutableObject(1);
  ASSERT_TRUE(r1->mutate_ns_flops(0));
  ASSERT_TRUE(r1->mutate_master_bytes(0));
  restamp(same);
  EXPECT_EQ(verify(same),
            "stats.rank_runs[1] has the figures of the run before it (adjacent runs must differ)");

  // Slot-load run 1 given run 0's load.
  std::vector<uint8_t> sameLoad = b;
  mutablePlan(sameLoad)->mutable_stats()->mutable_slot_load_run_values()->Mutate(1, 0.0);
  restamp(sameLoad);
  EXPECT_EQ(verify(sameLoad),
            "stats.slot_load run 1 has the load of the run before it (adjacent runs must differ)");

  // A plan that says it is 1.5 keeps its slot loads in stats.slot_load (and
  // its figures in stats.ranks).
  std::vector<uint8_t> old = b;
  ASSERT_TRUE(mutablePlan(old)->mutate_format_minor(5));
  restamp(old);
  EXPECT_EQ(verify(old), "stats.slot_load has 0 entries, expected 8 (num_shards*num_replicas)");
}

TEST(PlanRoundTrip, CompletePlanNeedsFields) {
  struct Case {
    const char *expect;
    bool (*drop)(const plan::Plan &);
  };
  const Case cases[] = {
      {"complete plan has no options",
       [](const plan::Plan &p) { return dropField(table(&p), plan::Plan::VT_OPTIONS); }},
      {"complete plan has no options.optimizer",
       [](const plan::Plan &p) {
         return dropField(table(p.options()), plan::Options::VT_OPTIMIZER);
       }},
      {"complete plan has no params",
       [](const plan::Plan &p) { return dropField(table(&p), plan::Plan::VT_PARAMS); }},
      {"stats.rank_runs is missing",
       [](const plan::Plan &p) { return dropField(table(p.stats()), plan::Stats::VT_RANK_RUNS); }},
      {"hook group 0 has no name",
       [](const plan::Plan &p) {
         return dropField(table(p.hook_groups()->Get(0)), plan::HookGroup::VT_NAME);
       }},
      {"hook group 0 'layers.0' has no params vector",
       [](const plan::Plan &p) {
         return dropField(table(p.hook_groups()->Get(0)), plan::HookGroup::VT_PARAMS);
       }},
      {"hook group 0 'layers.0' has no segments vector",
       [](const plan::Plan &p) {
         return dropField(table(p.hook_groups()->Get(0)), plan::HookGroup::VT_SEGMENTS);
       }},
      {"hook group 0 'layers.0' segment 0 has no params vector",
       [](const plan::Plan &p) {
         return dropField(table(p.hook_groups()->Get(0)->segments()->Get(0)),
                          plan::Segment::VT_PARAMS);
       }},
  };
  for (const Case &c : cases) {
    std::vector<uint8_t> b = writePlan(makeModel());
    ASSERT_TRUE(c.drop(*plan::GetPlan(b.data()))) << "field not present for: " << c.expect;
    restamp(b);
    EXPECT_EQ(verify(b), c.expect);
  }
}

// The complete-plan checks leave --stop-after plans printable.
TEST(PlanRoundTrip, CompletePlanChecksSkipPartialPlans) {
  PlanModel m = makeModel();
  m.stage = Stage::layout;
  m.options.optimizer.nsSteps = 0;
  m.stats.ranks.clear();
  m.params[0].dtype = DType::bf16;
  m.hookGroups[0].segments[1].params.clear();
  std::vector<uint8_t> b = writePlan(m);
  EXPECT_EQ(verify(b, /*requireComplete=*/false), "");
  EXPECT_EQ(verify(b, true),
            "plan was captured with --stop-after=layout; only complete plans can be loaded");
}

} // namespace

// Blocks (format 1.9): a matrix split in row blocks round trips and prints,
// and blocks that do not tile the matrix, or sit on a rule that keeps
// whole-matrix statistics, are refused with their own message.
TEST(PlanRoundTrip, MatrixBlocks) {
  auto model = [] {
    PlanModel m = makeModel();
    auto blocks = std::make_shared<MatrixBlocks>();
    blocks->dim = plan::BlockDim::rows;
    blocks->sizes = {64, 32, 32};
    blocks->source = plan::BlockSource::manifest_split;
    m.params[2].blocks = std::move(blocks);
    m.params[2].matrixOptimizer = MatrixOptimizer::normuon; // stored, so a case can change it
    return m;
  };
  std::vector<uint8_t> good = writePlan(model());
  ASSERT_EQ(verify(good), "");
  const plan::Plan *p = plan::GetPlan(good.data());
  ASSERT_TRUE(p->params()->Get(2)->block_sizes());
  EXPECT_EQ(p->params()->Get(2)->block_sizes()->size(), 3u);
  EXPECT_FALSE(p->params()->Get(0)->block_sizes());
  std::string t = planfile::printText(*p);
  EXPECT_TRUE(contains(t, " blocks=rows:[64,32,32] blocks_from=manifest_split ")) << t;

  const Mutation cases[] = {
      {"param 'layers.0.up.weight''s blocks sum to 96 rows, not its 128",
       [](plan::Plan &pl) {
         pl.mutable_params()->GetMutableObject(2)->mutable_block_sizes()->Mutate(0, 32);
         return true;
       }},
      {"param 'layers.0.up.weight' has a block of size 0 in a matrix of 128 rows",
       [](plan::Plan &pl) {
         pl.mutable_params()->GetMutableObject(2)->mutable_block_sizes()->Mutate(1, 0);
         return true;
       }},
      {"param 'layers.0.up.weight''s blocks sum to 128 cols, not its 64",
       [](plan::Plan &pl) {
         return pl.mutable_params()->GetMutableObject(2)->mutate_block_dim(plan::BlockDim::cols);
       }},
      {"param 'layers.0.up.weight' has block_sizes but no block_dim",
       [](plan::Plan &pl) {
         return pl.mutable_params()->GetMutableObject(2)->mutate_block_dim(plan::BlockDim::none);
       }},
      {"param 'layers.0.up.weight' has blocks; only muon and normuon matrices are orthogonalized "
       "as blocks",
       [](plan::Plan &pl) {
         return pl.mutable_params()->GetMutableObject(2)->mutate_matrix_optimizer(
             plan::MatrixOptimizer::soap);
       }},
  };
  expectEachRefused(model(), cases);
}
