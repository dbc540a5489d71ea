// Pipeline stages (docs/dmuonc.md, "Pipeline stages"): the default split is
// the best contiguous one, every owner is a rank of its param's stage, a
// rank's figures count its stage's params only, and the verifier holds a
// written plan to those rules.
#include "CompileSupport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

using namespace dmuon;
using unittest::compile;
using unittest::contains;
using unittest::verifyComplete;

namespace {

// Eight layers of uneven widths between an embedding and a head.
std::string manifest() {
  const int widths[] = {64, 128, 32, 96, 64, 160, 32, 64};
  std::string m = "[[param]]\nname = \"embed.weight\"\nshape = [500, 64]\n";
  for (int l = 0; l < 8; ++l)
    m += "[[param]]\nname = \"layers." + std::to_string(l) + ".w\"\nshape = [" +
         std::to_string(widths[l]) + ", 64]\n[[param]]\nname = \"layers." + std::to_string(l) +
         ".norm\"\nshape = [64]\n";
  m += "[[param]]\nname = \"head.weight\"\nshape = [500, 64]\n";
  return m;
}

PlanModel compiled(const std::string &mesh) {
  PlanModel model;
  std::string errors;
  EXPECT_TRUE(compile(manifest(), mesh, model, errors)) << errors;
  return model;
}

// The least largest-run sum over every cut of `w` into `parts` non-empty
// contiguous runs, by brute force.
int64_t bestLargestRun(const std::vector<int64_t> &w, size_t from, int parts) {
  if (parts == 1)
    return std::accumulate(w.begin() + static_cast<long>(from), w.end(), int64_t(0));
  int64_t best = -1, run = 0;
  for (size_t end = from; end + static_cast<size_t>(parts) <= w.size(); ++end) {
    run += w[end];
    const int64_t rest = bestLargestRun(w, end + 1, parts - 1);
    const int64_t worst = std::max(run, rest);
    if (best < 0 || worst < best)
      best = worst;
  }
  return best;
}

} // namespace

TEST(PipelineStages, DefaultSplitIsTheBestContiguousOne) {
  for (int stages = 2; stages <= 5; ++stages) {
    const PlanModel m = compiled("pp=" + std::to_string(stages) + ",dp_shard=2");
    // Layers in model order (each param's layer key: embed, layers.N, head).
    std::vector<int64_t> layerElements;
    std::vector<int> layerStage;
    std::string previous;
    for (const Param &p : m.params) {
      const std::string layer = defaultLayerOf(p.name);
      if (layerElements.empty() || layer != previous) {
        layerElements.push_back(0);
        layerStage.push_back(p.pipelineStage);
        previous = layer;
      }
      layerElements.back() += p.numElements();
      EXPECT_EQ(p.pipelineStage, layerStage.back()) << p.name << " leaves its layer's stage";
    }
    std::vector<int64_t> stageElements(static_cast<size_t>(stages), 0);
    for (size_t l = 0; l < layerStage.size(); ++l) {
      if (l > 0) {
        EXPECT_TRUE(layerStage[l] == layerStage[l - 1] || layerStage[l] == layerStage[l - 1] + 1)
            << "stages are contiguous runs, in order";
      }
      stageElements[static_cast<size_t>(layerStage[l])] += layerElements[l];
    }
    EXPECT_EQ(layerStage.front(), 0);
    EXPECT_EQ(layerStage.back(), stages - 1);
    for (int64_t e : stageElements)
      EXPECT_GT(e, 0);
    EXPECT_EQ(*std::max_element(stageElements.begin(), stageElements.end()),
              bestLargestRun(layerElements, 0, stages))
        << stages << " stages";
    ASSERT_EQ(m.stats.pipelineStages.size(), static_cast<size_t>(stages));
    for (int s = 0; s < stages; ++s)
      EXPECT_EQ(m.stats.pipelineStages[static_cast<size_t>(s)].paramElements,
                stageElements[static_cast<size_t>(s)]);
    EXPECT_EQ(verifyComplete(writePlan(m)), "");
  }
}

TEST(PipelineStages, OwnersAreRanksOfTheParamsStage) {
  // pp leads: rank = stage * 4 + r * 2 + s.
  const PlanModel m = compiled("pp=3,dp_replicate=2,dp_shard=2");
  int owned = 0;
  for (const Param &p : m.params) {
    if (p.unit < 0)
      continue;
    const Unit &u = m.units[static_cast<size_t>(p.unit)];
    EXPECT_EQ(u.pipelineStage, p.pipelineStage) << p.name;
    const int64_t rank = m.mesh.ownerRank(u.slot % 2, u.slot / 2, u.dataIndex, u.pipelineStage);
    EXPECT_EQ(rank, p.pipelineStage * 4 + (u.slot / 2) * 2 + u.slot % 2) << p.name;
    EXPECT_EQ(m.mesh.coordOf(rank)[0], p.pipelineStage) << p.name;
    ++owned;
  }
  EXPECT_GT(owned, 0);
  for (const HookGroup &h : m.hookGroups)
    for (const Segment &seg : h.segments)
      EXPECT_EQ(m.mesh.coordOf(seg.ownerRank)[0], h.pipelineStage) << h.name;
  // Slot loads: each stage's fine slots after the last's.
  EXPECT_EQ(m.stats.slotLoad.size(), 3u * 4u);
}

TEST(PipelineStages, RanksHoldTheirOwnStagesParamsOnly) {
  const PlanModel m = compiled("pp=2,dp_shard=2");
  // A rank's row: the last run that starts at or before it.
  auto rowOf = [&](int64_t rank) -> const RankFigures & {
    size_t k = 0;
    while (k + 1 < m.stats.ranks.size() && m.stats.ranks[k + 1].rank <= rank)
      ++k;
    return m.stats.ranks[k];
  };
  for (int stage = 0; stage < 2; ++stage) {
    int64_t owned = 0, elements = 0;
    for (const Param &p : m.params)
      if (p.pipelineStage == stage && p.route == Route::owner) {
        ++owned;
        elements += p.numElements();
      }
    int64_t rowsOwned = 0, rowsElements = 0;
    for (int64_t rank = 0; rank < m.mesh.worldSize(); ++rank)
      if (m.mesh.coordOf(rank)[0] == stage) {
        rowsOwned += rowOf(rank).ownedParams;
        rowsElements += rowOf(rank).ownedElements;
      }
    EXPECT_EQ(rowsOwned, owned) << "stage " << stage;
    EXPECT_EQ(rowsElements, elements) << "stage " << stage;
  }
}

TEST(PipelineStages, VerifierHoldsAPlanToTheStageRules) {
  {
    PlanModel m = compiled("pp=2,dp_shard=2");
    // Stage 0's last group moved to stage 1 (the order holds), its params not.
    m.hookGroups[static_cast<size_t>(m.stats.pipelineStages[1].firstHookGroup - 1)].pipelineStage =
        1;
    EXPECT_TRUE(contains(verifyComplete(writePlan(m)), "is on pipeline stage 1 but its param"))
        << verifyComplete(writePlan(m));
  }
  {
    PlanModel m = compiled("pp=2,dp_shard=2");
    m.hookGroups.back().pipelineStage = 0; // after stage 1's groups
    EXPECT_TRUE(contains(verifyComplete(writePlan(m)), "is on pipeline stage 0 after a group of "
                                                       "stage 1"))
        << verifyComplete(writePlan(m));
  }
  {
    PlanModel m = compiled("pp=2,dp_shard=2");
    m.stats.pipelineStages[1].params += 1;
    EXPECT_TRUE(contains(verifyComplete(writePlan(m)), "stats.pipeline_stages row 1 counts"))
        << verifyComplete(writePlan(m));
  }
  {
    PlanModel m = compiled("pp=2,dp_shard=2");
    m.params.back().pipelineStage = 2;
    EXPECT_TRUE(contains(verifyComplete(writePlan(m)),
                         "param 'head.weight': pipeline_stage 2 out of range (mesh has 2 "
                         "pipeline stages)"))
        << verifyComplete(writePlan(m));
  }
  {
    // An owner of stage 0 for a param of stage 1: its owner rank is not on
    // the param's stage.
    PlanModel m = compiled("pp=2,dp_shard=2");
    for (Unit &u : m.units)
      if (u.pipelineStage == 1)
        u.pipelineStage = 0;
    EXPECT_TRUE(contains(verifyComplete(writePlan(m)), "of its owner slot"))
        << verifyComplete(writePlan(m));
  }
}

TEST(PipelineStages, MeshStageDim) {
  Mesh mesh;
  std::string out;
  llvm::raw_string_ostream os(out);
  Diagnostics diags("dmuonc", os);
  ASSERT_TRUE(parseMesh("dp_shard=4,pp=2,tp=2", mesh, diags)) << out;
  EXPECT_EQ(mesh.stageDim, 1);
  EXPECT_EQ(mesh.numStages(), 2);
  EXPECT_FALSE(mesh.dims[1].carriesData);
  EXPECT_EQ(mesh.numSlots(), 4);
  // (s=3, stage 1, tp 0): (3 * 2 + 1) * 2.
  EXPECT_EQ(mesh.ownerRank(3, 0, 0, 1), 14);
  EXPECT_EQ(mesh.ownerRank(3, 0, 0), 12);
  EXPECT_EQ(mesh.str(), "dp_shard=4,pp=2,tp=2");
  Mesh other;
  ASSERT_TRUE(parseMesh("pipe=2:stage,dp_shard=2", other, diags)) << out;
  EXPECT_EQ(other.stageDim, 0);
  EXPECT_EQ(other.str(), "pipe=2:stage,dp_shard=2");
}
