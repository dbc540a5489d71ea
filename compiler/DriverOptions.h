// dmuonc's options as the user gave them (DriverFlags), the flags that bind
// them (DriverFlags.cpp), and their checks: ranges, combinations that make
// no sense, and what each implies. Tests and other front ends can fill the
// fields directly.
#ifndef DMUON_COMPILER_DRIVEROPTIONS_H
#define DMUON_COMPILER_DRIVEROPTIONS_H

#include "Model.h"
#include "Pipeline.h"
#include "plan/print/PlanPrinter.h"
#include "support/Diagnostics.h"
#include "support/OptionsBinder.h"

#include <cstdint>
#include <optional>
#include <string>

namespace dmuon {

struct DriverFlags {
  std::string input;
  InputFormat format = InputFormat::Auto;
  std::string mesh;
  std::string output = "-";
  PlanForm emit = PlanForm::Binary;
  std::string stopAfter; // empty: run every pass
  std::optional<std::string> dataCarryingDims;
  bool timePasses = false;
  bool verifyEach = false;

  // Planning.
  std::string hookBoundary;
  std::string pipelineSplit;
  uint64_t smallParamThreshold = 5'000'000;
  RoutePolicy adamwRoute = RoutePolicy::by_size;
  uint64_t shardedThreshold = 500'000;
  bool shardedThresholdGiven = false;
  std::string muonInclude, muonExclude;
  MatrixOptimizer matrixOptimizer = MatrixOptimizer::muon;
  std::vector<std::string> nsSplits; // --ns-split, as given
  bool splitInProj = true;
  bool strictNames = false;
  Mode mode = Mode::z3;
  bool modeGiven = false; // --mesh auto:N tries both modes unless --mode is given
  bool replicateAsync = true;
  unsigned alignment = 256;
  CostModel costModel = CostModel::flops;
  bool costModelGiven = false;
  std::string costTable;

  // The optimizer defaults recorded in the plan: the hyper-parameters that
  // have a flag (common/HyperParams.def), then the others.
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help) double camel = def;
#include "common/HyperParams.def"
  bool nesterov = true;
  unsigned nsSteps = 5;
  bool polarExpress = false;
  bool matchRmsAdamW = false;
  double qkClipTau = 100.0;
  unsigned soapPreconditionFrequency = 10, shampooPreconditionFrequency = 100;
  uint64_t soapMaxPrecondDim = 10000, shampooMaxPreconditionerDim = 8192;
  bool staggerRefreshes = true;

  // The memory check of the written plan: a device size ("80GiB"), or a
  // cluster description whose [device] memory it takes (docs/dmuonc.md).
  std::string deviceMemory, cluster;
  // With --mesh auto:N,pp=P: the simulated pipeline, over the cluster's
  // [pipeline] table.
  std::optional<std::string> pipelineSchedule;
  std::optional<int64_t> microBatches;
};

// What a run of dmuonc does, from valid flags.
struct DriverConfig {
  PipelineOptions pipeline;
  Options options;
  PlanForm emit = PlanForm::Binary;
  std::string output = "-";
  std::optional<double> deviceMemory; // bytes, from --device-memory
  std::string cluster;                // --cluster: its [device] memory
  // --mesh auto:N: choose the mesh (and, without --mode, the mode) by the
  // cluster's simulated step (docs/dmuonc.md, "Choosing the mesh").
  bool autoMesh = false;
  bool modeGiven = false;
  // --pipeline-schedule, --micro-batches: "1f1b" or "gpipe", and 1 to
  // 65536; empty and 0 when not given (the cluster's [pipeline]).
  std::string pipelineSchedule;
  int64_t microBatches = 0;
};

// Binds every field of `flags` to its dmuonc flag, listed in --help under
// `main` or, for the optimizer defaults the plan records, `optimizer`.
void bindDriverFlags(DriverFlags &flags, OptionsBinder &binder, llvm::cl::OptionCategory &main,
                     llvm::cl::OptionCategory &optimizer);

// Checks `flags` and fills `config`. Reports every problem it finds through
// `diags` ("--flag=value must be ..."), and returns false if there was one.
bool configureDriver(const DriverFlags &flags, Diagnostics &diags, DriverConfig &config);

} // namespace dmuon

#endif
