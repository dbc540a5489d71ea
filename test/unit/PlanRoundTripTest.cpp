// Plan writer -> verifier -> printers: determinism, corruption handling
// (every single-byte flip and every truncation is refused, without crashing),
// version and stage checks, semantic checks, and the printed forms.
#include "Diagnostics.h"
#include "Mesh.h"
#include "Model.h"
#include "PlanWriter.h"
#include "dmuon/plan_version.h"
#include "plan/PlanFile.h"
#include "plan-print/PlanPrinter.h"
#include "common/RankRows.h"
#include "common/SlotLoads.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <string>
#include <vector>

using namespace dmuon;
namespace fb = dmuon::plan;

namespace {

Param makeParam(const std::string &name, std::vector<int64_t> shape, Role role, size_t ndims) {
  Param p;
  p.name = name;
  p.shape = std::move(shape);
  p.placements.assign(ndims, Placement{});
  p.localShape = p.shape;
  p.role = role;
  if (role == Role::muon) {
    p.roleReason = RoleReason::default_matrix;
    p.rows = p.localRows = p.shape[0];
    p.cols = p.localCols = p.shape[1];
  } else {
    p.roleReason = RoleReason::default_vector;
  }
  return p;
}

// A complete plan for a 2x4 HSDP mesh (plus a tensor-parallel dim of size 1):
// two Muon matrices in one hook group, owned by slots 5 = (1,1) and 2 = (2,0)
// (the second a comm param gathered over tp), and one AdamW vector.
PlanModel makeModel() {
  PlanModel m;
  m.source = "tiny.toml";
  m.modelName = "tiny";
  m.mesh.dims = {{"dp_replicate", 2}, {"dp_shard", 4}, {"tp", 1}};
  m.mesh.replicateDim = 0;
  m.mesh.shardDim = 1;

  m.params.push_back(makeParam("layers.0.q.weight", {64, 64}, Role::muon, 3));
  m.params.push_back(makeParam("layers.0.norm.weight", {64}, Role::adamw, 3));
  m.params.back().dtype = DType::bf16;
  m.params.push_back(makeParam("layers.0.up.weight", {128, 64}, Role::muon, 3));
  m.params[2].placements[2] = Placement{PlacementKind::shard, 0, 1, "sum"};
  m.params[2].gatherMeshDim = 2;
  m.params[2].gatherTensorDim = 0;
  m.params[2].computeIndex = 0;
  m.params[2].sourceName = "onnx::MatMul_7";
  m.params[2].nameNote = "from node /layers.0/up/MatMul";

  m.params[0].group = ShardingGroupKind::no_comm;
  m.params[2].group = ShardingGroupKind::comm;
  m.params[2].commGroup = 0;
  m.noComm = {0};
  CommGroup cg;
  cg.key = "Replicate,Replicate,Shard(0)";
  cg.params = {2};
  cg.shardDims = {1};
  cg.replicateMeshDims = {0};
  m.commGroups.push_back(cg);

  for (int i : {0, 2}) {
    m.params[i].layer = "layers.0";
    m.params[i].unit = i == 0 ? 0 : 1;
    m.params[i].cost = i == 0 ? 5242880.0 : 7340032.5;
    m.params[i].hookGroup = 0;
  }
  Unit u0{"layers.0.q.weight", "layers.0", {0}, 5242880.0, 5};
  Unit u1{"layers.0.up.weight", "layers.0", {2}, 7340032.5, 2};
  m.units = {u0, u1};

  m.params[0].offset = 0;
  m.params[0].bytes = 16384;
  m.params[0].reduceOffset = 0;
  m.params[0].reduceBytes = 16384;
  m.params[2].offset = 16384;
  m.params[2].bytes = 32768;
  m.params[2].reduceOffset = 16384;
  m.params[2].reduceBytes = 32768;
  m.params[1].bytes = 256;

  HookGroup h;
  h.name = "layers.0";
  h.params = {0, 2};
  h.bufferBytes = 49152;
  h.reduceBufferBytes = 49152;
  Segment s2{2, m.mesh.slotRank(2, 0), 16384, 32768, 16384, 32768, {2}};
  Segment s5{5, m.mesh.slotRank(1, 1), 0, 16384, 0, 16384, {0}};
  h.segments = {s2, s5};
  m.hookGroups.push_back(h);

  m.stats.slotLoad.assign(8, 0.0);
  m.stats.slotLoad[5] = 5242880.0;
  m.stats.slotLoad[2] = 7340032.5;
  m.stats.totalCost = 12582912.5;
  m.stats.lowerBound = 7340032.5;
  m.stats.maxLoad = 7340032.5;
  m.stats.imbalance = 1.0;
  m.stats.lptMaxLoad = 7340032.5;
  for (int64_t r = 0; r < 8; ++r) {
    RankFigures f;
    f.rank = r;
    f.nsFlops = m.stats.slotLoad[r % 4 + 4 * (r / 4)];
    f.masterBytes = r == 5 ? 16384 : r == 2 ? 32768 : 0;
    f.allreduceBytes = 256;
    m.stats.ranks.push_back(f);
  }
  m.stage = Stage::complete;
  return m;
}

std::string verify(const std::vector<uint8_t> &b, bool requireComplete = true) {
  return planfile::verifyPlan(b.data(), b.size(), requireComplete);
}

fb::Plan *mutablePlan(std::vector<uint8_t> &b) { return fb::GetMutablePlan(b.data()); }

void restamp(std::vector<uint8_t> &b) { ASSERT_TRUE(planfile::stampFingerprint(b.data(), b.size())); }

bool contains(const std::string &s, const std::string &sub) {
  return s.find(sub) != std::string::npos;
}

TEST(PlanRoundTrip, Deterministic) {
  PlanModel m = makeModel();
  std::vector<uint8_t> a = writePlan(m), b = writePlan(m), c = writePlan(makeModel());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
}

TEST(PlanRoundTrip, VerifiesAndReadsBack) {
  std::vector<uint8_t> b = writePlan(makeModel());
  ASSERT_EQ(verify(b), "");
  const fb::Plan *p = fb::GetPlan(b.data());
  EXPECT_EQ(p->format_major(), DMUON_PLAN_FORMAT_MAJOR);
  EXPECT_EQ(p->format_minor(), DMUON_PLAN_FORMAT_MINOR);
  EXPECT_EQ(p->producer()->str(), std::string("dmuonc ") + DMUON_VERSION_STRING);
  EXPECT_EQ(p->stage(), fb::Stage::complete);
  EXPECT_EQ(p->mesh()->world_size(), 8);
  EXPECT_EQ(p->mesh()->num_shards(), 4);
  EXPECT_EQ(p->mesh()->num_replicas(), 2);
  ASSERT_EQ(p->params()->size(), 3u);
  const fb::Param *q = p->params()->Get(0);
  EXPECT_EQ(q->owner_shard(), 1);
  EXPECT_EQ(q->owner_replicate(), 1);
  EXPECT_EQ(q->owner_rank(), 5);
  const fb::Param *up = p->params()->Get(2);
  EXPECT_EQ(up->owner_rank(), 2);
  EXPECT_EQ(up->name_origin(), fb::NameOrigin::recovered_from_node);
  EXPECT_EQ(up->placements()->Get(2)->kind(), fb::PlacementKind::shard);
  ASSERT_TRUE(up->local_shape());
  EXPECT_EQ(up->local_shape()->size(), 2u);
  EXPECT_EQ(up->local_rows(), 128);
  EXPECT_EQ(up->gather_mesh_dim(), 2);
  EXPECT_EQ(up->gather_tensor_dim(), 0);
  EXPECT_EQ(up->compute_index(), 0);
  EXPECT_EQ(up->group(), fb::ShardingGroupKind::comm);
  EXPECT_EQ(up->cost(), 7340032.5);
  // 1.5: a comm group records its replicate mesh dims, not the rank lists
  // they give (the printers derive those; see PrintText below).
  const fb::CommGroup *cg = p->comm_groups()->Get(0);
  EXPECT_EQ(cg->replicate_groups(), nullptr);
  ASSERT_TRUE(cg->replicate_mesh_dims());
  EXPECT_EQ(cg->replicate_mesh_dims()->size(), 1u);
  const fb::Param *norm = p->params()->Get(1);
  EXPECT_EQ(norm->role(), fb::Role::adamw);
  EXPECT_EQ(norm->owner_rank(), -1);
  const fb::Segment *seg = p->hook_groups()->Get(0)->segments()->Get(1);
  EXPECT_EQ(seg->owner_rank(), 5);
  EXPECT_EQ(seg->owner_shard(), 1);
  EXPECT_EQ(seg->owner_replicate(), 1);
  EXPECT_EQ(p->stats()->muon_params(), 2);
  EXPECT_EQ(p->stats()->adamw_params(), 1);
  EXPECT_EQ(p->stats()->muon_elements(), 64 * 64 + 128 * 64);
  // 1.6: slot loads as runs of equal loads.
  EXPECT_EQ(p->stats()->slot_load(), nullptr);
  ASSERT_NE(p->stats()->slot_load_run_lengths(), nullptr);
  EXPECT_EQ(p->stats()->slot_load_run_lengths()->size(), 5u);
  const common::SlotLoads loads(p->stats());
  EXPECT_EQ(loads.size(), 8);
  EXPECT_EQ(loads.at(2), 7340032.5);
  EXPECT_EQ(loads.at(5), 5242880.0);
  EXPECT_EQ(loads.at(7), 0.0);
  uint64_t fp;
  ASSERT_TRUE(planfile::computeFingerprint(b.data(), b.size(), fp));
  EXPECT_EQ(fp, p->fingerprint());
  EXPECT_NE(fp, 0u);
}

TEST(PlanRoundTrip, EveryByteFlipIsRefused) {
  std::vector<uint8_t> good = writePlan(makeModel());
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<uint8_t> b = good;
    b[i] ^= 0xff;
    std::string e = verify(b);
    EXPECT_FALSE(e.empty()) << "flip at byte " << i << " was accepted";
  }
  std::vector<uint8_t> b = good;
  b[b.size() / 2] ^= 0x01;
  std::string e = verify(b);
  EXPECT_TRUE(contains(e, "fingerprint") || contains(e, "verification failed")) << e;
}

TEST(PlanRoundTrip, EveryTruncationIsRefused) {
  std::vector<uint8_t> good = writePlan(makeModel());
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> b(good.begin(), good.begin() + n);
    EXPECT_FALSE(verify(b).empty()) << "truncation to " << n << " bytes was accepted";
  }
  EXPECT_TRUE(contains(planfile::verifyPlan(good.data(), 4, true), "truncated"));
  EXPECT_TRUE(contains(planfile::verifyPlan(nullptr, 0, true), "truncated"));
}

TEST(PlanRoundTrip, WrongIdentifier) {
  std::vector<uint8_t> b = writePlan(makeModel());
  b[4] = 'X';
  EXPECT_EQ(verify(b), "not a dmuon plan (file identifier is not DMPL)");
}

TEST(PlanRoundTrip, NewerMajorIsRefused) {
  std::vector<uint8_t> b = writePlan(makeModel());
  ASSERT_TRUE(mutablePlan(b)->mutate_format_major(DMUON_PLAN_FORMAT_MAJOR + 1));
  restamp(b);
  std::string e = verify(b);
  EXPECT_TRUE(contains(e, "plan format 2." + std::to_string(DMUON_PLAN_FORMAT_MINOR) +
                              " is newer than this reader (1.x)"))
      << e;
  EXPECT_TRUE(contains(e, "rebuild with a newer dmuon")) << e;
}

TEST(PlanRoundTrip, NewerMinorIsAccepted) {
  std::vector<uint8_t> b = writePlan(makeModel());
  ASSERT_TRUE(mutablePlan(b)->mutate_format_minor(DMUON_PLAN_FORMAT_MINOR + 3));
  restamp(b);
  EXPECT_EQ(verify(b), "");
}

TEST(PlanRoundTrip, FingerprintMismatchMessage) {
  std::vector<uint8_t> b = writePlan(makeModel());
  ASSERT_TRUE(mutablePlan(b)->mutate_fingerprint(0x0123456789abcdefULL));
  std::string e = verify(b);
  EXPECT_TRUE(contains(e, "fingerprint mismatch: plan says 0x0123456789abcdef, contents hash to 0x"))
      << e;
  EXPECT_TRUE(contains(e, "(file modified or corrupt)")) << e;
}

TEST(PlanRoundTrip, MissingFingerprintField) {
  flatbuffers::FlatBufferBuilder fbb;
  auto root = fb::CreatePlan(fbb, DMUON_PLAN_FORMAT_MAJOR, DMUON_PLAN_FORMAT_MINOR);
  fb::FinishPlanBuffer(fbb, root);
  std::vector<uint8_t> b(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  uint64_t fp;
  EXPECT_FALSE(planfile::computeFingerprint(b.data(), b.size(), fp));
  EXPECT_TRUE(contains(verify(b), "fingerprint field is missing")) << verify(b);
}

TEST(PlanRoundTrip, StopAfterPlanNeedsComplete) {
  PlanModel m = makeModel();
  m.stage = Stage::layout;
  std::vector<uint8_t> b = writePlan(m);
  EXPECT_EQ(verify(b, /*requireComplete=*/false), "");
  EXPECT_EQ(verify(b, true),
            "plan was captured with --stop-after=layout; only complete plans can be loaded");
}

TEST(PlanRoundTrip, EveryStageVerifies) {
  for (int s = 0; s <= static_cast<int>(Stage::complete); ++s) {
    PlanModel m = makeModel();
    m.stage = static_cast<Stage>(s);
    std::vector<uint8_t> b = writePlan(m);
    EXPECT_EQ(verify(b, false), "") << "stage " << stageName(m.stage);
    const fb::Plan *p = fb::GetPlan(b.data());
    std::string text = planfile::printText(*p);
    EXPECT_EQ(contains(text, "units:"), s >= static_cast<int>(Stage::partition)) << text;
    EXPECT_EQ(contains(text, "role="), s >= static_cast<int>(Stage::select)) << text;
    EXPECT_EQ(contains(text, "hook_groups:"), s >= static_cast<int>(Stage::hooks)) << text;
    EXPECT_EQ(contains(text, "segment owner="), s >= static_cast<int>(Stage::layout)) << text;
  }
}

// Semantic checks: corrupt one field through the mutable API, restamp so the
// fingerprint passes, and expect a message naming the field.
TEST(PlanRoundTrip, SemanticChecks) {
  struct Case {
    const char *expect;
    bool (*mutate)(fb::Plan &);
  };
  const Case cases[] = {
      {"param 'layers.0.q.weight': owner_shard 9 out of range (mesh has 4 shards)",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(0)->mutate_owner_shard(9); }},
      {"param 'layers.0.q.weight': owner_rank 6 is not the rank 5 of its owner slot (1,1)",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(0)->mutate_owner_rank(6); }},
      {"param 'layers.0.q.weight': owner_rank 8 out of range (world size 8)",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(0)->mutate_owner_rank(8); }},
      {"param 'layers.0.up.weight': unit 2 out of range (plan has 2 units)",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_unit(2); }},
      {"param 'layers.0.up.weight': hook_group 1 out of range (plan has 1 hook groups)",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_hook_group(1); }},
      {"param 'layers.0.up.weight': comm_group 3 out of range",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_comm_group(3); }},
      {"param 'layers.0.up.weight': gather_mesh_dim 3 out of range (mesh has 3 dims)",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_gather_mesh_dim(3); }},
      {"param 'layers.0.up.weight': gather_mesh_dim 1 is a data-parallel mesh dim",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_gather_mesh_dim(1); }},
      {"param 'layers.0.up.weight': gather_tensor_dim 1 is not the tensor dim its gather mesh dim 2 shards",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_gather_tensor_dim(1); }},
      {"param 'layers.0.up.weight': compute_index 1 out of range (gather mesh dim 2 has size 1)",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_compute_index(1); }},
      {"param 'layers.0.q.weight': local_shape dim 0 is 48, expected 64 (the largest chunk of "
       "its size 64 over the model-parallel mesh dims that shard it)",
       [](fb::Plan &p) {
         p.mutable_params()->GetMutableObject(0)->mutable_local_shape()->Mutate(0, 48);
         return true;
       }},
      {"mesh world_size is 16 but its dims multiply to 8",
       [](fb::Plan &p) { return p.mutable_mesh()->mutate_world_size(16); }},
      {"mesh dim 'dp_shard' has size 0",
       [](fb::Plan &p) { return p.mutable_mesh()->mutable_dims()->GetMutableObject(1)->mutate_size(0); }},
      {"mesh num_shards is 3, expected 4",
       [](fb::Plan &p) { return p.mutable_mesh()->mutate_num_shards(3); }},
      {"mesh shard_dim 3 out of range",
       [](fb::Plan &p) { return p.mutable_mesh()->mutate_shard_dim(3); }},
      {"unit 1 'layers.0.up.weight': slot 8 out of range (plan has 8 owner slots)",
       [](fb::Plan &p) { return p.mutable_units()->GetMutableObject(1)->mutate_slot(8); }},
      {"unit 0 'layers.0.q.weight': param index 3 out of range (plan has 3 params)",
       [](fb::Plan &p) {
         p.mutable_units()->GetMutableObject(0)->mutable_params()->Mutate(0, 3);
         return true;
       }},
      {"no_comm: param index -1 out of range",
       [](fb::Plan &p) {
         p.mutable_no_comm()->Mutate(0, -1);
         return true;
       }},
      {"comm group 0 'Replicate,Replicate,Shard(0)': replicate mesh dim 3 out of range",
       [](fb::Plan &p) {
         p.mutable_comm_groups()->GetMutableObject(0)->mutable_replicate_mesh_dims()->Mutate(0, 3);
         return true;
       }},
      {"hook group 0 'layers.0' segment 0: bytes [40000, +32768) lie outside the buffer of "
       "49152 bytes",
       [](fb::Plan &p) {
         return p.mutable_hook_groups()->GetMutableObject(0)->mutable_segments()
             ->GetMutableObject(0)->mutate_offset(40000);
       }},
      {"hook group 0 'layers.0' segment 0: reduce bytes",
       [](fb::Plan &p) {
         return p.mutable_hook_groups()->GetMutableObject(0)->mutable_segments()
             ->GetMutableObject(0)->mutate_reduce_bytes(1 << 20);
       }},
      {"hook group 0 'layers.0' segment 1: owner_replicate 2 out of range",
       [](fb::Plan &p) {
         return p.mutable_hook_groups()->GetMutableObject(0)->mutable_segments()
             ->GetMutableObject(1)->mutate_owner_replicate(2);
       }},
      {"param 'layers.0.up.weight': bytes [16384, +40000) lie outside hook group 'layers.0'",
       [](fb::Plan &p) { return p.mutable_params()->GetMutableObject(2)->mutate_bytes(40000); }},
      {"stats.slots is 7, expected 8",
       [](fb::Plan &p) { return p.mutable_stats()->mutate_slots(7); }},
      {"unknown stage 9",
       [](fb::Plan &p) { return p.mutate_stage(static_cast<fb::Stage>(9)); }},
      {"param 'layers.0.norm.weight': unknown dtype 7",
       [](fb::Plan &p) {
         return p.mutable_params()->GetMutableObject(1)->mutate_dtype(static_cast<fb::DType>(7));
       }},
  };
  for (const Case &c : cases) {
    std::vector<uint8_t> b = writePlan(makeModel());
    ASSERT_TRUE(c.mutate(*mutablePlan(b))) << "field not present for: " << c.expect;
    restamp(b);
    std::string e = verify(b);
    EXPECT_TRUE(contains(e, c.expect)) << "expected: " << c.expect << "\n     got: " << e;
  }
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
  const fb::Plan *p = fb::GetPlan(good.data());
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

  struct Case {
    const char *expect;
    bool (*mutate)(fb::Plan &);
  };
  const Case cases[] = {
      {"options.qk_clip_tau is 0", [](fb::Plan &pl) {
         return pl.mutable_options()->mutate_qk_clip_tau(0);
       }},
      {"qk_clip pair #0: query 3 out of range (plan has 3 params)", [](fb::Plan &pl) {
         return pl.mutable_qk_clip()->GetMutableObject(0)->mutate_query(3);
       }},
      {"qk_clip pair #0: query and key are both param #2", [](fb::Plan &pl) {
         return pl.mutable_qk_clip()->GetMutableObject(0)->mutate_key(2);
       }},
      {"qk_clip pair #0: heads 6, key_heads 4, head_dim 16", [](fb::Plan &pl) {
         return pl.mutable_qk_clip()->GetMutableObject(0)->mutate_heads(6);
       }},
      {"qk_clip pair #0: param 'layers.0.up.weight' has 128 rows, not 8 heads x 8",
       [](fb::Plan &pl) { return pl.mutable_qk_clip()->GetMutableObject(0)->mutate_head_dim(8); }},
      {"qk_clip pair #0: param 'layers.0.norm.weight' is not a 2-D Muon matrix", [](fb::Plan &pl) {
         return pl.mutable_qk_clip()->GetMutableObject(0)->mutate_key(1);
       }},
  };
  for (const Case &c : cases) {
    std::vector<uint8_t> b = writePlan(model());
    ASSERT_TRUE(c.mutate(*mutablePlan(b))) << "field not present for: " << c.expect;
    restamp(b);
    std::string e = verify(b);
    EXPECT_TRUE(contains(e, c.expect)) << "expected: " << c.expect << "\n     got: " << e;
  }
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

fb::Param *P(fb::Plan &p, int i) { return p.mutable_params()->GetMutableObject(i); }

// Segment i of the one hook group.
fb::Segment *S(fb::Plan &p, int i) {
  return p.mutable_hook_groups()->GetMutableObject(0)->mutable_segments()->GetMutableObject(i);
}

// Complete plans: what the executor dereferences or trusts. Each case
// corrupts one field through the mutable API (then restamps) and expects the
// exact message.
TEST(PlanRoundTrip, CompletePlanChecks) {
  struct Case {
    const char *expect;
    bool (*mutate)(fb::Plan &);
  };
  const Case cases[] = {
      {"param 'layers.0.up.weight': unit 1 'layers.0.up.weight' slot -1 out of range (plan has "
       "8 owner slots)",
       [](fb::Plan &p) { return p.mutable_units()->GetMutableObject(1)->mutate_slot(-1); }},
      {"param 'layers.0.up.weight': owner slot (2,0) is not its unit's slot 6 (2,1)",
       [](fb::Plan &p) { return p.mutable_units()->GetMutableObject(1)->mutate_slot(6); }},
      {"param 'layers.0.q.weight' travels the owner route but has no hook_group",
       [](fb::Plan &p) { return P(p, 0)->mutate_hook_group(-1); }},
      {"param 'layers.0.q.weight' travels the owner route but has no offset (-1)",
       [](fb::Plan &p) { return P(p, 0)->mutate_offset(-1); }},
      {"param 'layers.0.q.weight' travels the owner route but has no reduce_offset (-1)",
       [](fb::Plan &p) { return P(p, 0)->mutate_reduce_offset(-1); }},
      {"param 'layers.0.q.weight': bytes is 16000, expected 16384 (4096 local elements of f32)",
       [](fb::Plan &p) { return P(p, 0)->mutate_bytes(16000); }},
      {"param 'layers.0.q.weight': reduce_bytes is 8192, expected 16384 (4096 local elements "
       "of f32)",
       [](fb::Plan &p) { return P(p, 0)->mutate_reduce_bytes(8192); }},
      {"param 'layers.0.q.weight': local matrix view 1x32x64 has 2048 elements but local_shape "
       "has 4096",
       [](fb::Plan &p) { return P(p, 0)->mutate_local_rows(32); }},
      {"param 'layers.0.q.weight': local matrix view 1x0x64 has a dim below 1 or more than 2^48 "
       "elements",
       [](fb::Plan &p) { return P(p, 0)->mutate_local_rows(0); }},
      {"param 'layers.0.q.weight': matrix view 1x32x64 has 2048 elements but shape has 4096",
       [](fb::Plan &p) { return P(p, 0)->mutate_rows(32); }},
      {"param 'layers.0.q.weight': matrix view 1x1048576x1073741824 has a dim below 1 or more "
       "than 2^48 elements",
       [](fb::Plan &p) {
         return P(p, 0)->mutate_rows(int64_t(1) << 20) && P(p, 0)->mutate_cols(int64_t(1) << 30);
       }},
      {"param 'layers.0.norm.weight': shape has more than 2^48 elements",
       [](fb::Plan &p) {
         P(p, 1)->mutable_shape()->Mutate(0, int64_t(1) << 49);
         return true;
       }},
      // local_shape is held to the chunking rule exactly, even over a zero
      // global dim (which once "divided" any local size).
      {"param 'layers.0.norm.weight': local_shape dim 0 is 562949953421312, expected 0 (the "
       "largest chunk of its size 0 over the model-parallel mesh dims that shard it)",
       [](fb::Plan &p) {
         P(p, 1)->mutable_shape()->Mutate(0, 0);
         P(p, 1)->mutable_local_shape()->Mutate(0, int64_t(1) << 49);
         return true;
       }},
      {"hook group 0 'layers.0' segment 0: owner_rank 3 is not the rank 2 of its owner slot "
       "(2,0)",
       [](fb::Plan &p) { return S(p, 0)->mutate_owner_rank(3); }},
      {"hook group 0 'layers.0' segment 0: param 'layers.0.norm.weight' does not travel the owner route",
       [](fb::Plan &p) {
         S(p, 0)->mutable_params()->Mutate(0, 1);
         return true;
       }},
      {"hook group 0 'layers.0' segment 0: param 'layers.0.q.weight' is owned by slot 5 (1,1), "
       "not the segment's slot 2 (2,0)",
       [](fb::Plan &p) {
         S(p, 0)->mutable_params()->Mutate(0, 0);
         return true;
       }},
      {"hook group 0 'layers.0' segment 1: param 'layers.0.q.weight': bytes [0, +16384) lie "
       "outside the segment's [0, +8192)",
       [](fb::Plan &p) { return S(p, 1)->mutate_bytes(8192); }},
      {"hook group 0 'layers.0' segment 1: param 'layers.0.q.weight': reduce bytes [0, +16384) "
       "lie outside the segment's [0, +8192)",
       [](fb::Plan &p) { return S(p, 1)->mutate_reduce_bytes(8192); }},
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
  const fb::Plan *p = fb::GetPlan(b.data());
  EXPECT_EQ(p->stats()->ranks(), nullptr);
  ASSERT_NE(p->stats()->rank_runs(), nullptr);
  EXPECT_EQ(p->stats()->rank_runs()->size(), 5u);
  const common::RankRows rows(*p);
  EXPECT_TRUE(rows.runs());
  for (int64_t r = 0; r < 8; ++r) {
    const fb::RankFigures *f = rows.ofRank(r);
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
  fb::RankFigures *r1 = mutablePlan(same)->mutable_stats()->mutable_rank_runs()->GetMutableObject(1);
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
    bool (*drop)(const fb::Plan &);
  };
  const Case cases[] = {
      {"complete plan has no options",
       [](const fb::Plan &p) { return dropField(table(&p), fb::Plan::VT_OPTIONS); }},
      {"complete plan has no options.optimizer",
       [](const fb::Plan &p) {
         return dropField(table(p.options()), fb::Options::VT_OPTIMIZER);
       }},
      {"complete plan has no params",
       [](const fb::Plan &p) { return dropField(table(&p), fb::Plan::VT_PARAMS); }},
      {"stats.rank_runs is missing",
       [](const fb::Plan &p) { return dropField(table(p.stats()), fb::Stats::VT_RANK_RUNS); }},
      {"hook group 0 has no name",
       [](const fb::Plan &p) {
         return dropField(table(p.hook_groups()->Get(0)), fb::HookGroup::VT_NAME);
       }},
      {"hook group 0 'layers.0' has no params vector",
       [](const fb::Plan &p) {
         return dropField(table(p.hook_groups()->Get(0)), fb::HookGroup::VT_PARAMS);
       }},
      {"hook group 0 'layers.0' has no segments vector",
       [](const fb::Plan &p) {
         return dropField(table(p.hook_groups()->Get(0)), fb::HookGroup::VT_SEGMENTS);
       }},
      {"hook group 0 'layers.0' segment 0 has no params vector",
       [](const fb::Plan &p) {
         return dropField(table(p.hook_groups()->Get(0)->segments()->Get(0)),
                          fb::Segment::VT_PARAMS);
       }},
  };
  for (const Case &c : cases) {
    std::vector<uint8_t> b = writePlan(makeModel());
    ASSERT_TRUE(c.drop(*fb::GetPlan(b.data()))) << "field not present for: " << c.expect;
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

TEST(PlanRoundTrip, ReadFileErrors) {
  std::vector<uint8_t> out;
  EXPECT_EQ(planfile::readFile("/nonexistent/dir/plan.bin", out), "No such file or directory");
  EXPECT_EQ(planfile::readFile("/", out), "Is a directory");
}

TEST(PlanRoundTrip, ReadFileRoundTrip) {
  std::vector<uint8_t> b = writePlan(makeModel());
  std::string path = ::testing::TempDir() + "/dmuon_roundtrip_plan.bin";
  FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), f), b.size());
  std::fclose(f);
  std::vector<uint8_t> back;
  ASSERT_EQ(planfile::readFile(path, back), "");
  EXPECT_EQ(back, b);
  std::remove(path.c_str());
}

TEST(PlanPrinter, TextForm) {
  std::vector<uint8_t> b = writePlan(makeModel());
  const fb::Plan *p = fb::GetPlan(b.data());
  std::string t = planfile::printText(*p);
  char fp[32];
  std::snprintf(fp, sizeof fp, "0x%016llx", static_cast<unsigned long long>(p->fingerprint()));
  std::string expectHead =
      "; dmuon plan 1.6 stage=complete producer=dmuonc " DMUON_VERSION_STRING "\n"
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
  std::string t = planfile::printText(*fb::GetPlan(b.data()));
  EXPECT_TRUE(contains(t, "; dmuon plan 1.6 stage=select ")) << t;
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
  std::string j = planfile::printJson(*fb::GetPlan(b.data()));
  EXPECT_TRUE(balanced(j)) << j;
  EXPECT_EQ(j.substr(0, 28), "{\n  \"format_version\": \"1.6\",") << j;
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
  std::string s = planfile::printSummary(*fb::GetPlan(b.data()));
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
  const fb::Plan *p = fb::GetPlan(b.data());
  std::string t = planfile::printText(*p);
  EXPECT_TRUE(contains(t, "hook=?")) << t;
  EXPECT_TRUE(contains(t, "  no_comm ?")) << t;
  EXPECT_FALSE(planfile::printJson(*p).empty());
  EXPECT_FALSE(planfile::printSummary(*p).empty());
}

} // namespace
