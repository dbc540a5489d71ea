// The grouping rule (docs/dmuonc.md#grouping): every example of the
// original specification's tables.
#include "support/Diagnostics.h"
#include "Passes.h"
#include "common/ReplicateGroups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

using namespace dmuon;

namespace {

struct Fixture {
  std::string diagText;
  llvm::raw_string_ostream os{diagText};
  Diagnostics diags{"dmuonc", os};
  PlanModel model;

  explicit Fixture(const std::string &mesh) { EXPECT_TRUE(parseMesh(mesh, model.mesh, diags)); }

  void add(const std::string &name, std::vector<int64_t> shape,
           std::vector<std::string> placements, bool forceMuon = false) {
    Param p;
    p.name = name;
    p.shape = std::move(shape);
    for (const std::string &t : placements) {
      Placement pl;
      std::string err;
      size_t col;
      EXPECT_TRUE(parsePlacement(t, pl, err, col)) << t;
      p.placements.push_back(pl);
    }
    if (forceMuon)
      p.optimizerOverride = OptimizerChoice{Role::muon, MatrixOptimizer::muon};
    model.params.push_back(p);
  }

  bool run() {
    bool ok = runSelect(model, diags) && runValidate(model, diags) && runGroup(model, diags);
    os.flush();
    return ok;
  }

  const Param &param(const std::string &name) const {
    for (const Param &p : model.params)
      if (p.name == name)
        return p;
    ADD_FAILURE() << "no param " << name;
    return model.params.front();
  }

  std::vector<int64_t> dimSizes() const {
    std::vector<int64_t> sizes;
    for (const auto &d : model.mesh.dims)
      sizes.push_back(d.size);
    return sizes;
  }

  // Every replicate group of `g`, as the printers list them.
  std::vector<std::vector<int64_t>> groupsOf(const CommGroup &g) const {
    std::vector<std::vector<int64_t>> out;
    common::forEachReplicateGroup(dimSizes(), g.replicateMeshDims, -1,
                                  [&](const std::vector<int64_t> &r) { out.push_back(r); });
    return out;
  }

  std::vector<int64_t> groupContaining(const CommGroup &g, int64_t rank) const {
    for (const auto &rg : groupsOf(g))
      if (std::find(rg.begin(), rg.end(), rank) != rg.end())
        return rg;
    return {};
  }
};

} // namespace

TEST(Group, OneDimParamInTheMuonSetIsAnError) {
  Fixture f("dp=2,tp=4");
  f.add("norm.weight", {128}, {"Replicate", "Replicate"}, /*forceMuon=*/true);
  EXPECT_FALSE(f.run());
  EXPECT_NE(f.diagText.find("param 'norm.weight' with shape [128] cannot use Muon"),
            std::string::npos)
      << f.diagText;
}

TEST(Group, LastTwoDimsRule) {
  Fixture f("dp=2,tp=4");
  f.add("a", {8, 16}, {"Replicate", "Replicate"});
  f.add("b", {8, 16}, {"Shard(0)", "Replicate"});
  f.add("c", {8, 16}, {"Replicate", "Shard(1)"});
  f.add("d", {4, 8, 16}, {"Shard(0)", "Replicate"});
  f.add("e", {4, 8, 16}, {"Replicate", "Shard(2)"});
  f.add("g", {4, 8, 16}, {"Replicate", "Shard(1)"});
  ASSERT_TRUE(f.run()) << f.diagText;
  EXPECT_EQ(f.param("a").group, ShardingGroupKind::no_comm);
  EXPECT_EQ(f.param("b").group, ShardingGroupKind::comm);
  EXPECT_EQ(f.param("c").group, ShardingGroupKind::comm);
  EXPECT_EQ(f.param("d").group, ShardingGroupKind::no_comm);
  EXPECT_EQ(f.param("e").group, ShardingGroupKind::comm);
  EXPECT_EQ(f.param("g").group, ShardingGroupKind::comm);
  // Grouped by placements key: c and g share Replicate,Shard(1).
  EXPECT_EQ(f.param("c").commGroup, f.param("g").commGroup);
  EXPECT_NE(f.param("b").commGroup, f.param("c").commGroup);
  EXPECT_EQ(f.model.commGroups[f.param("c").commGroup].key, "Replicate,Shard(1)");
}

TEST(Group, ReplicateGroupsOn2x4) {
  Fixture f("dp=2,tp=4");
  f.add("x", {8, 16}, {"Replicate", "Shard(1)"});
  f.add("y", {8, 16}, {"Shard(0)", "Shard(1)"});
  ASSERT_TRUE(f.run()) << f.diagText;
  const CommGroup &rx = f.model.commGroups[f.param("x").commGroup];
  EXPECT_EQ(f.groupContaining(rx, 2), (std::vector<int64_t>{2, 6}));
  const CommGroup &ry = f.model.commGroups[f.param("y").commGroup];
  EXPECT_EQ(f.groupContaining(ry, 2), (std::vector<int64_t>{2}));
}

TEST(Group, ReplicateGroupsOn2x2x2CartesianProduct) {
  Fixture f("dp=2,cp=2,tp=2");
  f.add("x", {8, 16}, {"Replicate", "Replicate", "Shard(1)"});
  ASSERT_TRUE(f.run()) << f.diagText;
  const CommGroup &g = f.model.commGroups[f.param("x").commGroup];
  EXPECT_EQ(f.groupContaining(g, 0), (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(f.groupsOf(g).size(), 2u);
}

// The formula (common/ReplicateGroups.h) against the rule itself: a rank's
// group is every rank that differs from it only on the replicate dims;
// groups sorted, each ascending. Meshes of 1-4 dims, every subset of dims.
TEST(Group, ReplicateGroupFormulaMatchesTheRule) {
  const std::vector<std::vector<int64_t>> meshes = {
      {6}, {2, 3}, {3, 1, 4}, {2, 3, 2, 2}};
  for (const auto &sizes : meshes) {
    const int n = static_cast<int>(sizes.size());
    int64_t world = 1;
    for (int64_t s : sizes)
      world *= s;
    for (int mask = 0; mask < (1 << n); ++mask) {
      std::vector<int> dims;
      for (int d = 0; d < n; ++d)
        if (mask & (1 << d))
          dims.push_back(d);
      std::set<std::vector<int64_t>> expected;
      for (int64_t a = 0; a < world; ++a) {
        std::vector<int64_t> group;
        for (int64_t b = 0; b < world; ++b) {
          bool same = true;
          for (int64_t x = a, y = b, d = n - 1; d >= 0; --d) {
            if (!(mask & (1 << d)) && x % sizes[d] != y % sizes[d])
              same = false;
            x /= sizes[d];
            y /= sizes[d];
          }
          if (same)
            group.push_back(b);
        }
        expected.insert(group);
      }
      std::vector<std::vector<int64_t>> got;
      common::forEachReplicateGroup(sizes, dims, -1,
                                    [&](const std::vector<int64_t> &r) { got.push_back(r); });
      EXPECT_EQ(got, std::vector<std::vector<int64_t>>(expected.begin(), expected.end()))
          << "mesh of " << n << " dims, replicate mask " << mask;
      EXPECT_EQ(common::replicateGroupShape(sizes, dims).count,
                static_cast<int64_t>(expected.size()));
      // A cut listing is the prefix of the full one.
      std::vector<std::vector<int64_t>> first;
      common::forEachReplicateGroup(sizes, dims, 1,
                                    [&](const std::vector<int64_t> &r) { first.push_back(r); });
      ASSERT_EQ(first.size(), 1u);
      EXPECT_EQ(first.front(), got.front());
    }
  }
}

TEST(Group, StridedShardAndPartialKeys) {
  Fixture f("dp=2,tp=2");
  f.add("s", {8, 16}, {"Replicate", "StridedShard(0, 2)"});
  f.add("p", {8, 16}, {"Partial(sum)", "Shard(1)"});
  ASSERT_TRUE(f.run()) << f.diagText;
  EXPECT_EQ(f.param("s").group, ShardingGroupKind::comm);
  EXPECT_EQ(f.model.commGroups[f.param("s").commGroup].key, "Replicate,Shard(0)");
  EXPECT_EQ(f.model.commGroups[f.param("p").commGroup].key, "Partial(sum),Shard(1)");
}
