// The limits every reader of a plan checks (common/ParamNames.h): the
// verifier refuses names dmuonc would refuse; the plan reader refuses a file
// over 2 GiB before reading it.
#include "Diagnostics.h"
#include "Frontend.h"
#include "Passes.h"
#include "PlanWriter.h"
#include "plan/PlanFile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace dmuon;
namespace fb = dmuon::plan;

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

// Runs every pass on a manifest; `errors` gets the diagnostics.
bool compile(const std::string &manifest, const std::string &mesh, PlanModel &model,
             std::string &errors) {
  llvm::raw_string_ostream os(errors);
  Diagnostics diags("dmuonc", os);
  bool ok = parseMesh(mesh, model.mesh, diags) &&
            loadTomlManifestFromBuffer(manifest, "limits.toml", model, diags);
  for (auto pass : {runSelect, runValidate, runGroup, runPartition, runHooks, runLayout})
    ok = ok && pass(model, diags) && !diags.hasErrors();
  model.stage = Stage::complete;
  os.flush();
  return ok;
}

std::vector<uint8_t> compiledPlan(const char *mesh = "2") {
  PlanModel model;
  std::string errors;
  EXPECT_TRUE(compile(kManifest, mesh, model, errors)) << errors;
  return writePlan(model);
}

std::string verify(const std::vector<uint8_t> &b) {
  return planfile::verifyPlan(b.data(), b.size(), true);
}

bool contains(const std::string &s, const std::string &sub) {
  return s.find(sub) != std::string::npos;
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
