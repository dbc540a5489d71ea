// Owners on meshes with data-carrying dims (docs/dmuonc.md, "Data-carrying
// dims"): a param Replicate on such a dim has one owner over dp x that dim;
// one it shards has an owner slot and, on each coordinate, an owner of that
// coordinate's shard. The partition balances both over the fine slots; the
// plan records them and the verifier holds them to the rule.
#include "CompileSupport.h"
#include "passes/Partitioner.h"

#include <gtest/gtest.h>

#include <set>

using namespace dmuon;
using unittest::compile;
using unittest::contains;
using unittest::verifyComplete;

namespace {

// Four dense matrices and a fused expert tensor split over ep.
constexpr const char *kMoe = R"toml(
[[param]]
name = "layers.0.attn.w"
shape = [64, 64]
[[param]]
name = "layers.1.attn.w"
shape = [64, 64]
[[param]]
name = "layers.2.attn.w"
shape = [64, 64]
[[param]]
name = "layers.3.attn.w"
shape = [64, 64]
[[param]]
name = "layers.0.experts"
shape = [4, 64, 64]
placements = { ep = "Shard(0)" }
[[param]]
name = "layers.0.norm"
shape = [64]
)toml";

PlanModel compiled(const std::string &mesh) {
  PlanModel model;
  model.options.smallParamThreshold = 0; // one unit per param
  std::string errors;
  EXPECT_TRUE(compile(kMoe, mesh, model, errors)) << errors;
  return model;
}

const Param &named(const PlanModel &m, const std::string &name) {
  for (const Param &p : m.params)
    if (p.name == name)
      return p;
  ADD_FAILURE() << "no param " << name;
  return m.params.front();
}

} // namespace

TEST(DataOwners, DenseParamsAreOwnedAcrossTheDataDim) {
  const PlanModel m = compiled("dp_shard=2,ep=2");
  EXPECT_EQ(m.stats.slotLoad.size(), 4u); // G * R * ep
  std::set<std::pair<int, int64_t>> owners;
  for (int l = 0; l < 4; ++l) {
    const Param &p = named(m, "layers." + std::to_string(l) + ".attn.w");
    EXPECT_EQ(p.dataDims, std::vector<int>{1});
    const Unit &u = m.units[p.unit];
    owners.insert({u.slot, u.dataIndex});
  }
  // The expert's cost (4/2 local matrices) fills one owner slot on both
  // coordinates; the four dense matrices take the other slot's two owners
  // and nothing else balances better.
  const Param &experts = named(m, "layers.0.experts");
  EXPECT_TRUE(experts.dataDims.empty());
  EXPECT_EQ(m.units[experts.unit].dataIndex, 0);
  EXPECT_EQ(owners.size(), 2u);
  for (const auto &[slot, d] : owners)
    EXPECT_NE(slot, m.units[experts.unit].slot);
  EXPECT_DOUBLE_EQ(m.stats.maxLoad, m.stats.lowerBound);
  EXPECT_EQ(verifyComplete(writePlan(m)), "");
}

TEST(DataOwners, FineSlotLoadsAreWhatRunsThere) {
  const PlanModel m = compiled("dp_replicate=2,dp_shard=2,ep=2");
  const int64_t D = 2;
  std::vector<double> want(static_cast<size_t>(m.mesh.numFineSlots()), 0.0);
  for (const Unit &u : m.units) {
    const bool dense = !m.params[u.params.front()].dataDims.empty();
    for (int64_t d = 0; d < D; ++d)
      if (!dense || d == u.dataIndex)
        want[static_cast<size_t>(u.slot * D + d)] += u.cost;
  }
  ASSERT_EQ(m.stats.slotLoad.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_DOUBLE_EQ(m.stats.slotLoad[i], want[i]) << "fine slot " << i;
  // The owner rank names the data coordinate: row-major over
  // (dp_replicate, dp_shard, ep).
  for (const Param &p : m.params) {
    if (p.unit < 0 || p.dataDims.empty())
      continue;
    const Unit &u = m.units[p.unit];
    EXPECT_EQ(m.mesh.ownerRank(u.slot % 2, u.slot / 2, u.dataIndex),
              (u.slot / 2) * 4 + (u.slot % 2) * 2 + u.dataIndex);
  }
}

TEST(DataOwners, PureModelParallelDimsAreNotSpanned) {
  const PlanModel m = compiled("dp_shard=2,ep=2:model");
  EXPECT_EQ(m.stats.slotLoad.size(), 2u);
  for (const Unit &u : m.units)
    EXPECT_EQ(u.dataIndex, 0);
  EXPECT_TRUE(named(m, "layers.0.attn.w").dataDims.empty());
}

// ------------------------------------------------------------- verifier

namespace {

// The verifier's verdict on the plan of a compiled model changed by
// `mutate` before it is written (the writer keeps owner_rank consistent).
template <typename Mutate> std::string verifyChangedModel(Mutate mutate) {
  PlanModel m = compiled("dp_shard=2,ep=2");
  mutate(m);
  return verifyComplete(writePlan(m));
}

Unit &unitOf(PlanModel &m, const std::string &name) {
  return m.units[static_cast<size_t>(named(m, name).unit)];
}

} // namespace

TEST(DataOwners, VerifierHoldsOwnersToTheRule) {
  // An owner on a data coordinate the mesh does not have.
  EXPECT_TRUE(contains(verifyChangedModel([](PlanModel &m) {
                         unitOf(m, "layers.0.attn.w").dataIndex = 2;
                       }),
                       "data index 2 out of range (plan has 2 data indices)"));
  // data_dims that are not the placements' rule.
  EXPECT_TRUE(contains(verifyChangedModel([](PlanModel &m) {
                         const_cast<Param &>(named(m, "layers.1.attn.w")).dataDims.clear();
                       }),
                       "param 'layers.1.attn.w': data_dims do not list the data-carrying mesh "
                       "dims it is Replicate on [1]"));
  // An expert owned at one ep coordinate only: ep shards it.
  EXPECT_TRUE(contains(verifyChangedModel([](PlanModel &m) {
                         unitOf(m, "layers.0.experts").dataIndex = 1;
                       }),
                       "param 'layers.0.experts': owner data index 1 has coordinate 1 on mesh "
                       "dim 1, which shards the param"));
  // An owner rank off the owner's data coordinate (a stored index: 1).
  std::vector<uint8_t> b = writePlan(compiled("dp_shard=2,ep=2"));
  plan::Plan &plan = *plan::GetMutablePlan(b.data());
  bool mutated = false;
  for (uint32_t i = 0; i < plan.params()->size() && !mutated; ++i)
    if (plan.params()->Get(i)->owner_data_index() == 1)
      mutated = plan.mutable_params()->GetMutableObject(i)->mutate_owner_data_index(0);
  ASSERT_TRUE(mutated) << "no param is owned at ep=1";
  ASSERT_TRUE(planfile::stampFingerprint(b.data(), b.size()));
  EXPECT_TRUE(contains(verifyComplete(b), "owner_rank")) << verifyComplete(b);
}

// ----------------------------------------------------------- partitioner

TEST(DataOwners, PartitionStartsFromInitialLoads) {
  PartitionProblem p;
  p.cost = {3, 3, 2};
  p.layer = {0, 1, 2};
  p.name = {"a", "b", "c"};
  p.slots = 2;
  p.initialLoad = {4, 0};
  PartitionResult r = partitionUnits(p);
  EXPECT_EQ(r.slotOf, (std::vector<int>{1, 1, 0}));
  EXPECT_EQ(r.load, (std::vector<double>{6, 6}));
  EXPECT_DOUBLE_EQ(r.maxLoad, 6);
}
