// Plan writer -> verifier: determinism, corruption handling (every
// single-byte flip and every truncation is refused, without crashing),
// version and stage checks, and plan files. Semantic checks are in
// PlanVerifierTest.cpp, the printed forms in PlanPrinterTest.cpp.
#include "PlanTestModel.h"
#include "dmuon/plan_version.h"
#include "plan/PlanFile.h"
#include "plan/print/PlanPrinter.h"
#include "common/RankRows.h"
#include "common/SlotLoads.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace dmuon;
using namespace dmuon::plan_test;

namespace {

TEST(PlanRoundTrip, Deterministic) {
  PlanModel m = makeModel();
  std::vector<uint8_t> a = writePlan(m), b = writePlan(m), c = writePlan(makeModel());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
}

TEST(PlanRoundTrip, VerifiesAndReadsBack) {
  std::vector<uint8_t> b = writePlan(makeModel());
  ASSERT_EQ(verify(b), "");
  const plan::Plan *p = plan::GetPlan(b.data());
  EXPECT_EQ(p->format_major(), DMUON_PLAN_FORMAT_MAJOR);
  EXPECT_EQ(p->format_minor(), DMUON_PLAN_FORMAT_MINOR);
  EXPECT_EQ(p->producer()->str(), std::string("dmuonc ") + DMUON_VERSION_STRING);
  EXPECT_EQ(p->stage(), plan::Stage::complete);
  EXPECT_EQ(p->mesh()->world_size(), 8);
  EXPECT_EQ(p->mesh()->num_shards(), 4);
  EXPECT_EQ(p->mesh()->num_replicas(), 2);
  ASSERT_EQ(p->params()->size(), 3u);
  const plan::Param *q = p->params()->Get(0);
  EXPECT_EQ(q->owner_shard(), 1);
  EXPECT_EQ(q->owner_replicate(), 1);
  EXPECT_EQ(q->owner_rank(), 5);
  const plan::Param *up = p->params()->Get(2);
  EXPECT_EQ(up->owner_rank(), 2);
  EXPECT_EQ(up->name_origin(), plan::NameOrigin::recovered_from_node);
  EXPECT_EQ(up->placements()->Get(2)->kind(), plan::PlacementKind::shard);
  ASSERT_TRUE(up->local_shape());
  EXPECT_EQ(up->local_shape()->size(), 2u);
  EXPECT_EQ(up->local_rows(), 128);
  EXPECT_EQ(up->gather_mesh_dim(), 2);
  EXPECT_EQ(up->gather_tensor_dim(), 0);
  EXPECT_EQ(up->compute_index(), 0);
  EXPECT_EQ(up->group(), plan::ShardingGroupKind::comm);
  EXPECT_EQ(up->cost(), 7340032.5);
  // 1.5: a comm group records its replicate mesh dims, not the rank lists
  // they give (the printers derive those; see PrintText below).
  const plan::CommGroup *cg = p->comm_groups()->Get(0);
  EXPECT_EQ(cg->replicate_groups(), nullptr);
  ASSERT_TRUE(cg->replicate_mesh_dims());
  EXPECT_EQ(cg->replicate_mesh_dims()->size(), 1u);
  const plan::Param *norm = p->params()->Get(1);
  EXPECT_EQ(norm->role(), plan::Role::adamw);
  EXPECT_EQ(norm->owner_rank(), -1);
  const plan::Segment *seg = p->hook_groups()->Get(0)->segments()->Get(1);
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
  auto root = plan::CreatePlan(fbb, DMUON_PLAN_FORMAT_MAJOR, DMUON_PLAN_FORMAT_MINOR);
  plan::FinishPlanBuffer(fbb, root);
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
    const plan::Plan *p = plan::GetPlan(b.data());
    std::string text = planfile::printText(*p);
    EXPECT_EQ(contains(text, "units:"), s >= static_cast<int>(Stage::partition)) << text;
    EXPECT_EQ(contains(text, "role="), s >= static_cast<int>(Stage::select)) << text;
    EXPECT_EQ(contains(text, "hook_groups:"), s >= static_cast<int>(Stage::hooks)) << text;
    EXPECT_EQ(contains(text, "segment owner="), s >= static_cast<int>(Stage::layout)) << text;
  }
}

// Semantic checks: corrupt one field through the mutable API, restamp so the
// fingerprint passes, and expect a message naming the field.

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

} // namespace
