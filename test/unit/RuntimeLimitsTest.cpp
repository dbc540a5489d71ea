// The runtime's range checks on what a host or a file gives it: every
// numeric option, over-long param names at the C ABI, every value of a
// checkpoint manifest, and the size of a plan file.
#include "RuntimeTestSupport.h"
#include "plan/Fingerprint.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <unistd.h>

namespace {

// Creates a runtime on the 1-rank plan with `edit` applied to the options;
// returns its status (and destroys a runtime that was created).
template <typename Edit> dmuon_status_t createWith(Edit edit) {
  dmuon_plan_t plan = nullptr;
  EXPECT_EQ(dmuon_plan_load_file(planPath("1").c_str(), &plan), DMUON_SUCCESS) << lastError();
  dmuon_runtime_options_t o = mpiOptions();
  edit(o);
  dmuon_runtime_t rt = nullptr;
  dmuon_status_t st = dmuon_runtime_create(plan, &o, &rt);
  dmuon_runtime_destroy(rt);
  dmuon_plan_destroy(plan);
  return st;
}

std::string makeTempDir() {
  char dir[] = "/tmp/dmuon-limits-XXXXXX";
  EXPECT_NE(::mkdtemp(dir), nullptr);
  return dir;
}

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Rewrites a manifest's body with `edit` and re-stamps its checksum, so only
// the edited value can make the load fail.
template <typename Edit> void rewriteManifest(const std::string &path, Edit edit) {
  std::string text = readText(path);
  std::string body = text.substr(0, text.rfind("end 0x"));
  edit(body);
  char end[40];
  std::snprintf(end, sizeof end, "end 0x%016" PRIx64 "\n",
                dmuon::planfile::fnv1a64(reinterpret_cast<const uint8_t *>(body.data()),
                                         body.size()));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << body << end;
}

void replaceLine(std::string &body, const std::string &key, const std::string &line) {
  size_t at = body.find("\n" + key + " ");
  ASSERT_NE(at, std::string::npos) << key;
  size_t eol = body.find('\n', at + 1);
  body.replace(at + 1, eol - at - 1, line);
}

} // namespace

TEST(RuntimeLimits, EveryNumericOptionIsRangeChecked) {
  const struct {
    void (*edit)(dmuon_runtime_options_t &);
    const char *expect;
  } cases[] = {
      {[](dmuon_runtime_options_t &o) { o.replicate_async = 7; }, "options.replicate_async=7"},
      {[](dmuon_runtime_options_t &o) { o.nesterov = -2; }, "options.nesterov=-2"},
      {[](dmuon_runtime_options_t &o) { o.manage_adamw = 3; }, "options.manage_adamw=3"},
      {[](dmuon_runtime_options_t &o) { o.lr = std::numeric_limits<double>::infinity(); },
       "options.lr=inf must be a finite fp32 number >= 0"},
      {[](dmuon_runtime_options_t &o) { o.momentum = 2; },
       "options.momentum=2 must be a number in [0, 1)"},
      {[](dmuon_runtime_options_t &o) { o.weight_decay = -1; }, "options.weight_decay=-1"},
      {[](dmuon_runtime_options_t &o) { o.adamw_lr = 1e39; }, "options.adamw_lr=1e+39"},
      {[](dmuon_runtime_options_t &o) { o.adamw_beta2 = 1; }, "options.adamw_beta2=1"},
      {[](dmuon_runtime_options_t &o) { o.adamw_eps = 0; },
       "options.adamw_eps=0 must be a finite fp32 number > 0"},
      {[](dmuon_runtime_options_t &o) { o.adamw_weight_decay = -0.5; },
       "options.adamw_weight_decay=-0.5"},
  };
  for (const auto &c : cases) {
    EXPECT_EQ(createWith(c.edit), DMUON_ERROR_INVALID_ARGUMENT) << c.expect;
    EXPECT_NE(lastError().find(c.expect), std::string::npos)
        << "expected: " << c.expect << "\n     got: " << lastError();
  }
  // NaN leaves a hyper-parameter to the plan; the range's ends are allowed.
  EXPECT_EQ(createWith([](dmuon_runtime_options_t &o) {
              o.lr = std::nan("");
              o.momentum = 0;
              o.replicate_async = 1;
            }),
            DMUON_SUCCESS)
      << lastError();
}

TEST_F(OneRank, OverLongParamNamesAreRefusedAsSuch) {
  std::string name(5000, 'w');
  std::vector<float> v(4, 0.f);
  EXPECT_EQ(dmuon_runtime_bind_param(rt, name.c_str(), v.data(), 4),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("is longer than 4096 bytes"), std::string::npos) << err();
}

TEST_F(OneRank, CheckpointManifestValuesAreChecked) {
  bindAll(0.25f);
  const std::string dir = makeTempDir(), manifest = dir + "/checkpoint";
  ASSERT_EQ(dmuon_checkpoint_save(rt, dir.c_str(), 7), DMUON_SUCCESS) << err();
  const std::string good = readText(manifest);
  const struct {
    const char *key, *line, *expect;
  } cases[] = {
      {"step", "step banana", "manifest line 'step banana': step must be an integer >= 0"},
      {"step", "step 7x", "step must be an integer >= 0"},
      {"adamw_step", "adamw_step -1", "adamw_step must be an integer >= 0"},
      {"world_size", "world_size 0", "world_size must be an integer between 1 and"},
      {"steps_applied", "steps_applied 99999999999999999999", "steps_applied must be an integer"},
      {"plan_fingerprint", "plan_fingerprint 0x12", "plan_fingerprint must be 0x and 16 hex"},
      {"hyper_momentum", "hyper_momentum 0x1p+1", "hyper_momentum=2 must be a number in [0, 1)"},
      {"hyper_lr", "hyper_lr nan", "hyper_lr=nan must be a finite fp32 number >= 0"},
      {"step", "step 1 2", "expected '<key> <value>'"},
  };
  for (const auto &c : cases) {
    std::ofstream(manifest, std::ios::binary | std::ios::trunc) << good;
    rewriteManifest(manifest, [&](std::string &body) { replaceLine(body, c.key, c.line); });
    int64_t step = -1;
    EXPECT_EQ(dmuon_checkpoint_load(rt, dir.c_str(), &step), DMUON_ERROR_INVALID_ARGUMENT)
        << c.line;
    EXPECT_NE(err().find(c.expect), std::string::npos)
        << "expected: " << c.expect << "\n     got: " << err();
  }
  // The untouched manifest still loads.
  std::ofstream(manifest, std::ios::binary | std::ios::trunc) << good;
  int64_t step = -1;
  EXPECT_EQ(dmuon_checkpoint_load(rt, dir.c_str(), &step), DMUON_SUCCESS) << err();
  EXPECT_EQ(step, 7);
  std::filesystem::remove_all(dir);
}

TEST(RuntimeLimits, APlanFileOver2GiBIsRefusedUnread) {
  const std::string dir = makeTempDir(), path = dir + "/huge.plan";
  { std::ofstream(path, std::ios::binary); }
  ASSERT_EQ(::truncate(path.c_str(), int64_t(3) << 30), 0); // sparse: costs nothing
  dmuon_plan_t plan = nullptr;
  EXPECT_NE(dmuon_plan_load_file(path.c_str(), &plan), DMUON_SUCCESS);
  EXPECT_EQ(plan, nullptr);
  EXPECT_NE(lastError().find("larger than 2 GiB, the limit for a plan"), std::string::npos)
      << lastError();
  std::filesystem::remove_all(dir);
}
