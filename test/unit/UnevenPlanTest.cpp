// Model-parallel shards that do not divide their tensor dim (torch.chunk, as
// DTensor: docs/dmuonc.md, "Model parallelism") through the compiler, the
// plan writer and the verifier: local_shape is the largest slice, every
// figure counts it, and the verifier holds local_shape to the rule.
#include "CompileSupport.h"

#include <gtest/gtest.h>

using namespace dmuon;
using unittest::compile;
using unittest::contains;
using unittest::verifyComplete;

namespace {

// A GPT-2 vocabulary's head and bias over tp.
constexpr const char *kVocab = R"toml(
[[param]]
name = "lm_head.weight"
shape = [50257, 64]
placements = { tp = "Shard(0)" }
[[param]]
name = "lm_head.bias"
shape = [50257]
placements = { tp = "Shard(0)" }
[[param]]
name = "layers.0.w"
shape = [64, 64]
)toml";

PlanModel compiled(const std::string &mesh) {
  PlanModel model;
  model.options.smallParamThreshold = 0;
  std::string errors;
  EXPECT_TRUE(compile(kVocab, mesh, model, errors)) << errors;
  return model;
}

} // namespace

TEST(UnevenPlan, LocalShapeIsTheLargestSlice) {
  const PlanModel m = compiled("dp_shard=2,tp=2");
  EXPECT_EQ(m.params[0].localShape, (std::vector<int64_t>{25129, 64}));
  EXPECT_EQ(m.params[1].localShape, (std::vector<int64_t>{25129}));
  // Packed bytes of the largest slice; the gather moves it from every rank.
  EXPECT_EQ(m.params[0].bytes, 25129 * 64 * 4);
  for (const RankFigures &f : m.stats.ranks)
    EXPECT_EQ((f.gatherSend + f.gatherRecv) % (25129 * 64 * 4), 0) << "rank " << f.rank;
  EXPECT_EQ(verifyComplete(writePlan(m)), "");
}

TEST(UnevenPlan, VerifierHoldsLocalShapeToTheRule) {
  std::vector<uint8_t> b = writePlan(compiled("dp_shard=2,tp=2"));
  // The smaller slice is no local_shape: every rank pads to the largest.
  plan::Param *bias = plan::GetMutablePlan(b.data())->mutable_params()->GetMutableObject(1);
  bias->mutable_local_shape()->Mutate(0, 25128);
  ASSERT_TRUE(planfile::stampFingerprint(b.data(), b.size()));
  EXPECT_TRUE(contains(verifyComplete(b),
                       "param 'lm_head.bias': local_shape dim 0 is 25128, expected 25129"))
      << verifyComplete(b);
}

TEST(UnevenPlan, EmptyShardsAreRefused) {
  // torch.chunk of 6 rows over 4: 2, 2, 2 and nothing.
  PlanModel model;
  std::string errors;
  EXPECT_FALSE(compile("[[param]]\nname = \"b\"\nshape = [6]\nplacements = { tp = \"Shard(0)\" }\n",
                       "dp_shard=2,tp=4", model, errors));
  EXPECT_TRUE(contains(errors, "leaves some ranks an empty shard")) << errors;
}
