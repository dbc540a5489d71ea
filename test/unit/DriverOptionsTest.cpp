// dmuonc's option checks as a library call (compiler/DriverOptions.h): what
// a valid command line turns into, and that every bad flag of one command
// line is named, not only the first.
#include "DriverOptions.h"

#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dmuon {
namespace {

struct Configured {
  bool ok;
  std::string errors;
  DriverConfig config;
};

Configured configure(const DriverFlags &flags) {
  Configured c;
  llvm::raw_string_ostream os(c.errors);
  Diagnostics diags("dmuonc", os);
  c.ok = configureDriver(flags, diags, c.config);
  os.flush();
  return c;
}

DriverFlags validFlags() {
  DriverFlags f;
  f.input = "model.toml";
  f.mesh = "2x4";
  return f;
}

TEST(DriverOptions, ValidFlagsBecomeThePipelineAndPlanOptions) {
  DriverFlags f = validFlags();
  f.emit = PlanForm::Json;
  f.stopAfter = "partition";
  f.costTable = "times.csv";
  f.lr = 0.05;
  f.nsSteps = 7;
  f.mode = Mode::z2;
  f.alignment = 512;
  const Configured c = configure(f);
  ASSERT_TRUE(c.ok) << c.errors;
  EXPECT_EQ(c.config.pipeline.input, "model.toml");
  EXPECT_EQ(c.config.pipeline.mesh, "2x4");
  EXPECT_EQ(c.config.pipeline.stopAfter, Stage::partition);
  EXPECT_EQ(c.config.emit, PlanForm::Json);
  // A cost table alone implies the table cost model.
  EXPECT_EQ(c.config.options.costModel, CostModel::table);
  EXPECT_EQ(c.config.options.costTablePath, "times.csv");
  EXPECT_EQ(c.config.options.optimizer.lr, 0.05);
  EXPECT_EQ(c.config.options.optimizer.nsSteps, 7);
  EXPECT_EQ(c.config.options.mode, Mode::z2);
  EXPECT_EQ(c.config.options.alignment, 512);
}

TEST(DriverOptions, EveryBadFlagIsNamedInOneRun) {
  DriverFlags f = validFlags();
  f.lr = std::nan("");
  f.momentum = 2;
  f.alignment = 100;
  f.nsSteps = 0;
  f.qkClipTau = -1;
  const Configured c = configure(f);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.errors.find("--lr=nan must be"), std::string::npos) << c.errors;
  EXPECT_NE(c.errors.find("--momentum=2 must be a number in [0, 1)"), std::string::npos);
  EXPECT_NE(c.errors.find("--alignment=100 must be a power of two"), std::string::npos);
  EXPECT_NE(c.errors.find("--ns-steps=0 must be"), std::string::npos);
  EXPECT_NE(c.errors.find("--qk-clip-tau=-1 must be a finite number > 0"), std::string::npos);
}

TEST(DriverOptions, CombinationsThatMeanNothingAreRefused) {
  DriverFlags stopToBinary = validFlags();
  stopToBinary.stopAfter = "group";
  EXPECT_NE(configure(stopToBinary).errors.find("captures a partial plan"), std::string::npos);

  DriverFlags unknownPass = validFlags();
  unknownPass.emit = PlanForm::Text;
  unknownPass.stopAfter = "complete";
  EXPECT_NE(configure(unknownPass).errors.find("unknown pass 'complete'"), std::string::npos);

  DriverFlags thresholdWithoutAuto = validFlags();
  thresholdWithoutAuto.shardedThresholdGiven = true;
  thresholdWithoutAuto.adamwRoute = RoutePolicy::owner;
  EXPECT_NE(configure(thresholdWithoutAuto).errors.find("applies only with --adamw-route=auto"),
            std::string::npos);

  DriverFlags tableWithoutFile = validFlags();
  tableWithoutFile.costModel = CostModel::table;
  EXPECT_NE(configure(tableWithoutFile).errors.find("needs --cost-table=<file>"),
            std::string::npos);

  DriverFlags fileWithFlops = validFlags();
  fileWithFlops.costTable = "times.csv";
  fileWithFlops.costModelGiven = true;
  EXPECT_NE(configure(fileWithFlops).errors.find("--cost-table needs --cost-model=table"),
            std::string::npos);
}

TEST(DriverOptions, AutoMeshNeedsAClusterAndACompletePlan) {
  DriverFlags f = validFlags();
  f.mesh = "auto:8";
  f.cluster = "cluster.toml";
  const Configured ok = configure(f);
  ASSERT_TRUE(ok.ok) << ok.errors;
  EXPECT_TRUE(ok.config.autoMesh);
  EXPECT_FALSE(ok.config.modeGiven);

  DriverFlags noCluster = validFlags();
  noCluster.mesh = "auto:8";
  noCluster.emit = PlanForm::Text;
  noCluster.stopAfter = "group";
  const Configured bad = configure(noCluster);
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.errors.find("give --cluster=<cluster.toml>"), std::string::npos) << bad.errors;
  EXPECT_NE(bad.errors.find("cannot be combined with --stop-after"), std::string::npos);

  EXPECT_FALSE(configure(validFlags()).config.autoMesh);
}

} // namespace
} // namespace dmuon
