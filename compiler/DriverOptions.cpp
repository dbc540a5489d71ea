#include "DriverOptions.h"
#include "AutoMesh.h"
#include "support/ByteSize.h"

#include "common/HyperRanges.h"
#include "common/PlanRules.h"
#include "sim/Cluster.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Regex.h"

#include <cstdio>
#include <utility>

namespace dmuon {

namespace {

// Counts and thresholds in elements stay far below the 2^62 byte bound of
// every plan figure (common/PlanRules.h) even at 8 bytes an element.
constexpr uint64_t kMaxElementOption = 1ULL << 48;

bool checkPipelineFlags(const DriverFlags &f, Diagnostics &diags, PipelineOptions &p) {
  bool ok = true;
  p.input = f.input;
  p.format = f.format;
  p.mesh = f.mesh;
  p.dataCarryingDims = f.dataCarryingDims;
  p.timePasses = f.timePasses;
  p.verifyEach = f.verifyEach;
  if (!f.stopAfter.empty()) {
    std::optional<Stage> s = parseStage(f.stopAfter);
    if (!s || *s == Stage::complete) {
      diags.error("unknown pass '" + f.stopAfter +
                  "' for --stop-after (expected frontend, select, validate, group, "
                  "partition, hooks or layout)");
      ok = false;
    } else if (f.emit == PlanForm::Binary) {
      diags.error("--stop-after=" + f.stopAfter +
                  " captures a partial plan; print it with --emit=text, --emit=json or "
                  "--emit=html");
      ok = false;
    } else {
      p.stopAfter = *s;
    }
  }
  return ok;
}

// --ns-split=REGEX=[rows:|cols:]N or REGEX=[rows:|cols:]a,b,...: the regex
// is everything before the last '=' (a regex may hold '=', a spec never).
bool parseBlockRule(const std::string &text, Diagnostics &diags, Options::BlockRule &out) {
  auto fail = [&](const llvm::Twine &why) {
    diags.error("--ns-split=" + text + ": " + why);
    return false;
  };
  const size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0)
    return fail("expected REGEX=SPEC, e.g. 'c_attn\\.weight$=cols:3'");
  out.text = text;
  out.pattern = text.substr(0, eq);
  std::string err;
  if (!llvm::Regex(out.pattern).isValid(err))
    return fail("invalid regex '" + out.pattern + "': " + err);
  llvm::StringRef spec = llvm::StringRef(text).substr(eq + 1);
  out.blocks.dim = plan::BlockDim::rows;
  out.blocks.source = plan::BlockSource::split_flag;
  if (spec.consume_front("cols:"))
    out.blocks.dim = plan::BlockDim::cols;
  else
    spec.consume_front("rows:");
  llvm::SmallVector<llvm::StringRef, 8> fields;
  spec.split(fields, ',');
  for (llvm::StringRef field : fields) {
    int64_t size = 0;
    if (field.getAsInteger(10, size) || size < 1 || size > INT32_MAX)
      return fail("'" + field + "' is not a block count or size (an integer from 1 to " +
                  llvm::Twine(INT32_MAX) + "); SPEC is [rows:|cols:]N or [rows:|cols:]a,b,...");
    out.blocks.sizes.push_back(size);
  }
  if (fields.size() == 1) {
    out.blocks.count = out.blocks.sizes.front();
    out.blocks.sizes.clear();
  }
  return true;
}

bool checkPlanningFlags(const DriverFlags &f, Diagnostics &diags, Options &o) {
  bool ok = true;
  if (f.alignment == 0 || (f.alignment & (f.alignment - 1)) != 0 || f.alignment > 65536) {
    diags.error("--alignment=" + std::to_string(f.alignment) +
                " must be a power of two no larger than 65536");
    ok = false;
  }
  if (f.smallParamThreshold > kMaxElementOption) {
    diags.error("--small-param-threshold=" + std::to_string(f.smallParamThreshold) +
                " is too large");
    ok = false;
  }
  if (f.shardedThreshold > kMaxElementOption) {
    diags.error("--sharded-threshold=" + std::to_string(f.shardedThreshold) + " is too large");
    ok = false;
  }
  if (f.shardedThresholdGiven && f.adamwRoute != RoutePolicy::by_size) {
    diags.error("--sharded-threshold applies only with --adamw-route=auto");
    ok = false;
  }
  if (!f.costTable.empty() && f.costModelGiven && f.costModel == CostModel::flops) {
    diags.error("--cost-table needs --cost-model=table");
    ok = false;
  } else if (f.costModel == CostModel::table && f.costTable.empty()) {
    diags.error("--cost-model=table needs --cost-table=<file>");
    ok = false;
  }
  o.costModel = f.costTable.empty() ? f.costModel : CostModel::table;
  o.costTablePath = f.costTable;
  o.mode = f.mode;
  o.replicateAsync = f.replicateAsync;
  o.smallParamThreshold = static_cast<int64_t>(f.smallParamThreshold);
  o.routePolicy = f.adamwRoute;
  o.shardedThreshold = static_cast<int64_t>(f.shardedThreshold);
  o.strictNames = f.strictNames;
  o.matrixOptimizer = f.matrixOptimizer;
  for (const std::string &text : f.nsSplits) {
    Options::BlockRule rule;
    if (parseBlockRule(text, diags, rule))
      o.blockRules.push_back(std::move(rule));
    else
      ok = false;
  }
  o.splitInProj = f.splitInProj;
  o.hookBoundary = f.hookBoundary;
  o.pipelineSplit = f.pipelineSplit;
  o.muonInclude = f.muonInclude;
  o.muonExclude = f.muonExclude;
  o.alignment = static_cast<int>(f.alignment);
  return ok;
}

// The optimizer defaults the plan records, in the ranges the verifier and
// the runtime accept (common/HyperRanges.h).
bool checkOptimizerFlags(const DriverFlags &f, Diagnostics &diags, Options &o) {
  bool ok = true;
  if (!common::nsStepsInRange(f.nsSteps)) {
    diags.error("--ns-steps=" + std::to_string(f.nsSteps) + " must be " +
                common::nsStepsRangeText());
    ok = false;
  }
  const std::pair<const char *, std::pair<double, const common::HyperRange *>> hypers[] = {
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  {"--" flag, {f.camel, &common::range}},
#include "common/HyperParams.def"
  };
  for (const auto &[flag, valueAndRange] : hypers) {
    const auto &[value, range] = valueAndRange;
    if (std::string e = common::hyperRangeError(flag, value, *range); !e.empty()) {
      diags.error(e);
      ok = false;
    }
  }
  for (const auto &[flag, value] :
       {std::pair{"--soap-precondition-frequency", uint64_t(f.soapPreconditionFrequency)},
        std::pair{"--shampoo-precondition-frequency", uint64_t(f.shampooPreconditionFrequency)}})
    if (!common::preconditionFrequencyInRange(static_cast<int64_t>(value))) {
      diags.error(std::string(flag) + "=" + std::to_string(value) + " must be " +
                  common::preconditionFrequencyRangeText());
      ok = false;
    }
  for (const auto &[flag, value] :
       {std::pair{"--soap-max-precond-dim", f.soapMaxPrecondDim},
        std::pair{"--shampoo-max-preconditioner-dim", f.shampooMaxPreconditionerDim}})
    if (!common::maxPreconditionDimInRange(static_cast<int64_t>(value))) {
      diags.error(std::string(flag) + "=" + std::to_string(value) + " must be " +
                  common::maxPreconditionDimRangeText());
      ok = false;
    }
  if (!common::kQkClipTauRange.contains(f.qkClipTau)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", f.qkClipTau);
    diags.error("--qk-clip-tau=" + std::string(text) + " must be a finite number > 0");
    ok = false;
  }
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  o.optimizer.camel = f.camel;
#include "common/HyperParams.def"
  o.optimizer.nesterov = f.nesterov;
  o.optimizer.nsSteps = static_cast<int>(f.nsSteps);
  o.optimizer.polarExpress = f.polarExpress;
  o.optimizer.matchRmsAdamW = f.matchRmsAdamW;
  o.optimizer.soapPreconditionFrequency = static_cast<int>(f.soapPreconditionFrequency);
  o.optimizer.soapMaxPrecondDim = static_cast<int64_t>(f.soapMaxPrecondDim);
  o.optimizer.shampooPreconditionFrequency = static_cast<int>(f.shampooPreconditionFrequency);
  o.optimizer.shampooMaxPreconditionerDim = static_cast<int64_t>(f.shampooMaxPreconditionerDim);
  o.optimizer.staggerRefreshes = f.staggerRefreshes;
  o.qkClipTau = f.qkClipTau;
  return ok;
}

// --device-memory / --cluster: the check needs a complete plan's per-rank
// figures.
bool checkMemoryFlags(const DriverFlags &f, Diagnostics &diags, DriverConfig &config) {
  bool ok = true;
  if (!f.deviceMemory.empty()) {
    std::optional<double> bytes = parseByteSize(f.deviceMemory);
    if (!bytes || *bytes <= 0) {
      diags.error("--device-memory=" + f.deviceMemory +
                  " must be a positive size such as 80GiB or 141GB (units B, KB, MB, GB, TB, "
                  "KiB, MiB, GiB, TiB) or a number of bytes");
      ok = false;
    } else {
      config.deviceMemory = *bytes;
    }
  }
  if (!f.deviceMemory.empty() && !f.cluster.empty()) {
    diags.error("--device-memory and --cluster both give the device's memory; give one");
    ok = false;
  }
  if ((!f.deviceMemory.empty() || !f.cluster.empty()) && !f.stopAfter.empty()) {
    diags.error(std::string(f.cluster.empty() ? "--device-memory" : "--cluster") +
                " checks a complete plan's memory; it cannot be combined with --stop-after");
    ok = false;
  }
  config.cluster = f.cluster;
  return ok;
}

// --mesh auto:N simulates complete plans on a cluster.
bool checkAutoMeshFlags(const DriverFlags &f, Diagnostics &diags, DriverConfig &config) {
  config.autoMesh = isAutoMesh(f.mesh);
  config.modeGiven = f.modeGiven;
  if (!config.autoMesh)
    return true;
  bool ok = true;
  if (f.cluster.empty()) {
    diags.error("--mesh " + f.mesh +
                " ranks the candidate meshes by their predicted step on a cluster; give "
                "--cluster=<cluster.toml> (docs/cluster-format.md)" +
                (f.deviceMemory.empty() ? "" : " in place of --device-memory"));
    ok = false;
  }
  if (!f.stopAfter.empty()) {
    diags.error("--mesh " + f.mesh +
                " simulates complete plans; it cannot be combined with --stop-after");
    ok = false;
  }
  return ok;
}

// --pipeline-schedule, --micro-batches: how --mesh auto:N simulates a
// pipeline; a plan dmuonc only writes has no simulated schedule to set.
bool checkScheduleFlags(const DriverFlags &f, Diagnostics &diags, DriverConfig &config) {
  bool ok = true;
  if ((f.pipelineSchedule || f.microBatches) && !isAutoMesh(f.mesh)) {
    diags.error(std::string(f.pipelineSchedule ? "--pipeline-schedule" : "--micro-batches") +
                " sets the pipeline --mesh auto:N simulates; without auto, simulate the plan with "
                "dmuon-plan --simulate (which takes the same flags)");
    ok = false;
  }
  if (f.pipelineSchedule) {
    if (*f.pipelineSchedule != "1f1b" && *f.pipelineSchedule != "gpipe") {
      diags.error("--pipeline-schedule=" + *f.pipelineSchedule + " must be 1f1b or gpipe");
      ok = false;
    }
    config.pipelineSchedule = *f.pipelineSchedule;
  }
  if (f.microBatches) {
    if (*f.microBatches < 1 || *f.microBatches > sim::kMaxMicroBatches) {
      diags.error("--micro-batches=" + std::to_string(*f.microBatches) + " must be from 1 to " +
                  std::to_string(sim::kMaxMicroBatches));
      ok = false;
    }
    config.microBatches = *f.microBatches;
  }
  return ok;
}

} // namespace

bool configureDriver(const DriverFlags &flags, Diagnostics &diags, DriverConfig &config) {
  config.emit = flags.emit;
  config.output = flags.output;
  // Each check reports all of its problems, so one run names every bad flag.
  bool ok = checkMemoryFlags(flags, diags, config);
  ok &= checkAutoMeshFlags(flags, diags, config);
  ok &= checkScheduleFlags(flags, diags, config);
  ok &= checkPipelineFlags(flags, diags, config.pipeline);
  ok &= checkPlanningFlags(flags, diags, config.options);
  ok &= checkOptimizerFlags(flags, diags, config.options);
  return ok;
}

} // namespace dmuon
