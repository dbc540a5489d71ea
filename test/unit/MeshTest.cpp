#include "AutoMesh.h"
#include "support/Diagnostics.h"
#include "Mesh.h"

#include <gtest/gtest.h>

using namespace dmuon;

namespace {

struct Parsed {
  bool ok;
  Mesh mesh;
  std::string diag;
};

Parsed parse(const std::string &text) {
  std::string out;
  llvm::raw_string_ostream os(out);
  Diagnostics diags("dmuonc", os);
  Mesh m;
  bool ok = parseMesh(text, m, diags);
  os.flush();
  return {ok, m, out};
}

} // namespace

TEST(Mesh, OneDimIsDataParallelShard) {
  Parsed p = parse("8");
  ASSERT_TRUE(p.ok) << p.diag;
  EXPECT_EQ(p.mesh.str(), "dp_shard=8");
  EXPECT_EQ(p.mesh.numShards(), 8);
  EXPECT_EQ(p.mesh.numReplicas(), 1);
}

TEST(Mesh, TwoDimIsReplicateByShardRowMajor) {
  Parsed p = parse("2x4");
  ASSERT_TRUE(p.ok) << p.diag;
  EXPECT_EQ(p.mesh.str(), "dp_replicate=2,dp_shard=4");
  EXPECT_EQ(p.mesh.numSlots(), 8);
  // rank = r * G + s
  EXPECT_EQ(p.mesh.slotRank(3, 1), 7);
  EXPECT_EQ(p.mesh.coordOf(6), (std::vector<int64_t>{1, 2}));
}

TEST(Mesh, NamedDimsWithModelParallel) {
  Parsed p = parse("dp_replicate=2,dp_shard=2,tp=2");
  ASSERT_TRUE(p.ok) << p.diag;
  EXPECT_EQ(p.mesh.worldSize(), 8);
  EXPECT_EQ(p.mesh.numSlots(), 4);
  // slot (s=1, r=1) with tp at 0.
  EXPECT_EQ(p.mesh.slotRank(1, 1), 6);
  EXPECT_EQ(p.mesh.rankOf({1, 1, 1}), 7);
}

TEST(Mesh, DpIsAnAliasOfDpShard) {
  Parsed p = parse("dp=2,tp=4");
  ASSERT_TRUE(p.ok) << p.diag;
  EXPECT_EQ(p.mesh.dims[0].name, "dp_shard");
  EXPECT_EQ(p.mesh.shardDim, 0);
}

TEST(Mesh, ErrorsPointIntoTheMeshText) {
  Parsed zero = parse("2x0");
  EXPECT_FALSE(zero.ok);
  EXPECT_NE(zero.diag.find("<mesh>:1:3: error: mesh dimension size must be at least 1"),
            std::string::npos)
      << zero.diag;
  Parsed dup = parse("tp=2,tp=4");
  EXPECT_FALSE(dup.ok);
  EXPECT_NE(dup.diag.find("given twice"), std::string::npos) << dup.diag;
  EXPECT_FALSE(parse("").ok);
  EXPECT_FALSE(parse("2x").ok);
  EXPECT_FALSE(parse("2x2x2").ok);
  EXPECT_FALSE(parse("a=").ok);
  EXPECT_FALSE(parse("99999999999999999999").ok);
}

TEST(AutoMesh, CandidatesFactorWhatTheModelParallelDimsLeave) {
  std::string out;
  llvm::raw_string_ostream os(out);
  Diagnostics diags("dmuonc", os);
  AutoMeshSpec spec;
  ASSERT_TRUE(parseAutoMesh("auto:24,tp=2,ep=2:model", spec, diags)) << out;
  EXPECT_EQ(spec.ranks, 24);
  EXPECT_EQ(spec.modelParallelSize, 4);
  EXPECT_EQ(spec.modelParallelText, ",tp=2,ep=2:model");
  std::vector<std::string> texts;
  for (const MeshCandidate &c : autoMeshCandidates(spec)) {
    EXPECT_EQ(c.replicas * c.shards, 6);
    texts.push_back(c.text);
  }
  // Fewest replicas first; dp_replicate only when more than one.
  EXPECT_EQ(texts, (std::vector<std::string>{"dp_shard=6,tp=2,ep=2:model",
                                             "dp_replicate=2,dp_shard=3,tp=2,ep=2:model",
                                             "dp_replicate=3,dp_shard=2,tp=2,ep=2:model",
                                             "dp_replicate=6,dp_shard=1,tp=2,ep=2:model"}));
  // Each candidate is a mesh --mesh parses, of the same ranks.
  for (const std::string &t : texts) {
    Parsed p = parse(t);
    ASSERT_TRUE(p.ok) << p.diag;
    EXPECT_EQ(p.mesh.worldSize(), 24);
  }
}

TEST(AutoMesh, OnlyAutoPrefixedMeshesAreAuto) {
  EXPECT_TRUE(isAutoMesh("auto"));
  EXPECT_TRUE(isAutoMesh("auto:8"));
  EXPECT_FALSE(isAutoMesh("auto=2,dp_shard=4")); // a dim named auto
  EXPECT_FALSE(isAutoMesh("8"));
}
