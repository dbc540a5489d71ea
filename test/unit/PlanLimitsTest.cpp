// The limits every reader of a plan checks (common/PlanRules.h,
// common/ParamNames.h, common/HyperRanges.h): the verifier refuses names
// dmuonc would refuse, byte figures past 2^62 and optimizer defaults out of
// range; validate refuses a model whose figures would pass 2^62; the plan
// reader refuses a file over 2 GiB before reading it.
#include "CompileSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace dmuon;

namespace {

constexpr const char *kManifest = R"(
[[param]]
name = "layers.0.w"
shape = [64, 64]
[[param]]
name = "layers.0.norm"
shape = [64]
[[param]]
name = "layers.1.w"
shape = [64, 32]
)";

using unittest::compile;
using unittest::contains;

std::vector<uint8_t> compiledPlan(const char *mesh = "2") {
  PlanModel model;
  std::string errors;
  EXPECT_TRUE(compile(kManifest, mesh, model, errors)) << errors;
  return writePlan(model);
}

std::string verify(const std::vector<uint8_t> &b) { return unittest::verifyComplete(b); }

// Applies `mutate` to the plan in place, re-stamps the fingerprint and
// returns the verifier's message.
template <typename Mutate> std::string verifyMutated(Mutate mutate) {
  std::vector<uint8_t> b = compiledPlan();
  EXPECT_TRUE(mutate(*plan::GetMutablePlan(b.data())));
  EXPECT_TRUE(planfile::stampFingerprint(b.data(), b.size()));
  return verify(b);
}

} // namespace

TEST(PlanLimits, TheCompiledPlanVerifies) { EXPECT_EQ(verify(compiledPlan()), ""); }

TEST(PlanLimits, VerifierRefusesNamesTheCompilerRefuses) {
  const struct {
    std::string name, expect;
  } cases[] = {
      {"layers.0.w\nx", "the name 'layers.0.w\\x0ax' contains a control character (0x0a)"},
      {std::string("a\0b", 3), "the name 'a\\x00b' contains a control character (0x00)"},
      {"bad\xff", "is not valid UTF-8"},
      {std::string(4097, 'w'), "is 4097 bytes long (at most 4096)"},
  };
  for (const auto &c : cases) {
    PlanModel model;
    std::string errors;
    ASSERT_TRUE(compile(kManifest, "2", model, errors)) << errors;
    model.params[1].name = c.name; // the writer takes any string
    std::string e = verify(writePlan(model));
    EXPECT_TRUE(contains(e, c.expect)) << "expected: " << c.expect << "\n     got: " << e;
  }
  // 4096 bytes of UTF-8 are fine.
  PlanModel model;
  std::string errors;
  ASSERT_TRUE(compile(kManifest, "2", model, errors)) << errors;
  model.params[1].name = std::string(4094, 'w') + "\xc3\xa9";
  EXPECT_EQ(verify(writePlan(model)), "");
}

TEST(PlanLimits, VerifierRefusesByteFiguresPast2To62) {
  const int64_t tooMany = (int64_t(1) << 62) + 1;
  std::string e = verifyMutated([&](plan::Plan &p) {
    return p.mutable_stats()->mutable_rank_runs()->GetMutableObject(0)->mutate_broadcast_recv_bytes(
        tooMany);
  });
  EXPECT_TRUE(contains(e, "stats.rank_runs[0].broadcast_recv_bytes is 4611686018427387905, more "
                          "than 2^62"))
      << e;
  e = verifyMutated([&](plan::Plan &p) {
    return p.mutable_hook_groups()->GetMutableObject(0)->mutate_buffer_bytes(INT64_MAX);
  });
  EXPECT_TRUE(contains(e, "has a buffer of more than 2^62 bytes")) << e;
}

TEST(PlanLimits, VerifierRefusesOptimizerDefaultsOutOfRange) {
  // The writer records what the model says; the verifier checks it.
  const struct {
    void (*edit)(OptimizerDefaults &);
    const char *expect;
  } cases[] = {
      {[](OptimizerDefaults &o) { o.lr = std::nan(""); },
       "options.optimizer.lr=nan must be a number in [0, 10]"},
      {[](OptimizerDefaults &o) { o.momentum = 1.0; },
       "options.optimizer.momentum=1 must be a number in [0, 1)"},
      {[](OptimizerDefaults &o) { o.weightDecay = 1e39; },
       "options.optimizer.weight_decay=1e+39 must be a number in [0, 10]"},
      {[](OptimizerDefaults &o) { o.adamwEps = -1e-8; },
       "options.optimizer.adamw_eps=-1e-08 must be a number in (0, 1]"},
      {[](OptimizerDefaults &o) { o.adamwBeta1 = -0.1; },
       "options.optimizer.adamw_beta1=-0.1 must be a number in [0, 1)"},
  };
  for (const auto &c : cases) {
    PlanModel model;
    std::string errors;
    ASSERT_TRUE(compile(kManifest, "2", model, errors)) << errors;
    c.edit(model.options.optimizer);
    std::string e = verify(writePlan(model));
    EXPECT_TRUE(contains(e, c.expect)) << "expected: " << c.expect << "\n     got: " << e;
  }
}

TEST(PlanLimits, ValidateRefusesModelsWhoseFiguresWouldOverflow) {
  // 2^48 f64 elements (the most one param may have): its broadcast on a
  // 4096-rank mesh passes 2^63 bytes.
  const std::string huge = R"(
[[param]]
name = "layers.0.w"
shape = [16777216, 16777216]
dtype = "f64"
)";
  PlanModel model;
  std::string errors;
  EXPECT_FALSE(compile(huge, "4096", model, errors));
  EXPECT_TRUE(contains(errors, "param 'layers.0.w'")) << errors;
  EXPECT_TRUE(contains(errors, "per-rank byte figures would pass 2^62")) << errors;
  PlanModel one;
  errors.clear();
  EXPECT_TRUE(compile(huge, "1", one, errors)) << errors;
}

TEST(PlanLimits, ReadFileRefusesAFileOverItsLimitUnread) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("dmuon-limits-" + std::to_string(::getpid())))
          .string();
  { std::ofstream(path, std::ios::binary) << "0123456789"; }
  std::vector<uint8_t> out;
  EXPECT_EQ(planfile::readFile(path, out, 10), "");
  EXPECT_EQ(out.size(), 10u);
  EXPECT_EQ(planfile::readFile(path, out, 9), "the file is larger than 9 bytes, the limit for a plan");
  EXPECT_TRUE(out.empty());
  ASSERT_EQ(::truncate(path.c_str(), int64_t(3) << 30), 0); // sparse
  EXPECT_EQ(planfile::readFile(path, out), "the file is larger than 2 GiB, the limit for a plan");
  std::filesystem::remove(path);
}

// One dim limit from dmuonc to the host (DMUON_MAX_DIMS): a plan that
// another writer gave a 9-dim param is refused at load, not accepted by
// create and bind and then refused by dmuon_plan_param_info.
TEST(PlanLimits, VerifierRefusesParamsWithMoreDimsThanTheCAbiHolds) {
  const std::string eight = R"(
[[param]]
name = "w"
shape = [2, 2, 2, 2, 2, 2, 2, 2]
)";
  PlanModel model;
  std::string errors;
  ASSERT_TRUE(compile(eight, "1", model, errors)) << errors;
  EXPECT_EQ(verify(writePlan(model)), "");
  model.params[0].shape.push_back(1);
  model.params[0].localShape.push_back(1);
  const std::string e = verify(writePlan(model));
  EXPECT_TRUE(contains(e, "has 9 dims; a param has at most 8")) << e;
}
