// dmuonc's command line and what a run does with it: the options (checked
// by compiler/DriverOptions.cpp), the pipeline, the plan's own verification,
// and the output in the chosen form.
#include "DmuoncMain.h"

#include "AutoSearch.h"
#include "DriverOptions.h"
#include "Pipeline.h"
#include "PlanWriter.h"
#include "ToolSupport.h"
#include "support/Diagnostics.h"

#include "dmuon/plan_version.h"
#include "plan/print/PlanPrinter.h"
#include "plan/print/PrintCommon.h"
#include "sim/Cluster.h"
#include "sim/Memory.h"

#include "llvm/Support/BuryPointer.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Timer.h"
#include "llvm/Support/ToolOutputFile.h"

#include <exception>
#include <optional>
#include <utility>

using namespace llvm;

namespace {

cl::OptionCategory category("dmuonc options");

cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx|model.toml>"),
                               cl::Required, cl::cat(category));
cl::opt<dmuon::InputFormat> inputFormat(
    "input-format", cl::desc("Input format (default: from the file extension)"),
    cl::init(dmuon::InputFormat::Auto),
    cl::values(clEnumValN(dmuon::InputFormat::Toml, "toml", "TOML manifest"),
               clEnumValN(dmuon::InputFormat::Onnx, "onnx", "ONNX model")),
    cl::cat(category));
cl::opt<std::string> meshSpec(
    "mesh", cl::desc("Device mesh: '8', '2x4' (dp_replicate x dp_shard), "
                     "'dp_replicate=2,dp_shard=2,tp=2', or 'auto:N[,tp=8...]' to choose "
                     "dp_replicate x dp_shard (and the mode) by simulating on --cluster"),
    cl::value_desc("mesh"), cl::Required, cl::cat(category));
cl::opt<std::string> outputPath("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(category));

cl::opt<dmuon::PlanForm> emitKind(
    "emit", cl::desc("Output form"), cl::init(dmuon::PlanForm::Binary),
    cl::values(clEnumValN(dmuon::PlanForm::Binary, "bin", "binary plan (FlatBuffers)"),
               clEnumValN(dmuon::PlanForm::Text, "text", "line-oriented text"),
               clEnumValN(dmuon::PlanForm::Json, "json", "JSON"),
               clEnumValN(dmuon::PlanForm::Html, "html",
                          "self-contained HTML report (inline CSS and SVG)")),
    cl::cat(category));
cl::opt<std::string> stopAfter(
    "stop-after",
    cl::desc("Stop after a pass and print its state: frontend, select, validate, "
             "group, partition, hooks or layout (needs --emit=text|json)"),
    cl::value_desc("pass"), cl::cat(category));
cl::opt<std::string> hookBoundary(
    "hook-boundary",
    cl::desc("Regex: hook on the lowest ancestor module whose path matches "
             "(default: layers.N / blocks.N / h.N, else the parent module)"),
    cl::value_desc("regex"), cl::cat(category));
cl::opt<unsigned long long> smallParamThreshold(
    "small-param-threshold",
    cl::desc("Params with fewer elements merge per layer into one unit"),
    cl::init(5'000'000), cl::cat(category));
cl::opt<dmuon::RoutePolicy> adamwRoute(
    "adamw-route", cl::desc("How the non-Muon params travel (docs/dmuonc.md#routes)"),
    cl::init(dmuon::RoutePolicy::by_size),
    cl::values(clEnumValN(dmuon::RoutePolicy::by_size, "auto",
                          "sharded at or above --sharded-threshold elements, else owner "
                          "(default)"),
               clEnumValN(dmuon::RoutePolicy::owner, "owner",
                          "with the layer's Muon params: owner broadcast / reduce, AdamW "
                          "on the owner"),
               clEnumValN(dmuon::RoutePolicy::sharded, "sharded",
                          "flat shards over dp_shard: all-gather / reduce-scatter"),
               clEnumValN(dmuon::RoutePolicy::replicated, "replicated",
                          "on every rank, gradients all-reduced"),
               clEnumValN(dmuon::RoutePolicy::host, "host",
                          "the host manages them; the runtime leaves them alone")),
    cl::cat(category));
cl::opt<bool> strictNames(
    "strict-names",
    cl::desc("An ONNX initializer whose torch parameter name cannot be recovered (a "
             "constant-folded export) is an error, not a warning"),
    cl::cat(category));
cl::opt<unsigned long long> shardedThreshold(
    "sharded-threshold",
    cl::desc("With --adamw-route=auto, non-Muon params with at least this many elements "
             "are sharded"),
    cl::init(500'000), cl::cat(category));
cl::opt<std::string> muonInclude("muon-include",
                                 cl::desc("Regex of param names forced onto Muon"),
                                 cl::value_desc("regex"), cl::cat(category));
cl::opt<std::string> muonExclude("muon-exclude",
                                 cl::desc("Regex of param names forced onto AdamW"),
                                 cl::value_desc("regex"), cl::cat(category));
cl::opt<dmuon::Mode> mode(
    "mode", cl::desc("Packed-buffer lifetime"), cl::init(dmuon::Mode::z3),
    cl::values(clEnumValN(dmuon::Mode::z3, "z3", "reshard after forward (ZeRO-3)"),
               clEnumValN(dmuon::Mode::z2, "z2", "keep packed buffers (ZeRO-2)")),
    cl::cat(category));
cl::opt<bool> replicateAsync(
    "replicate-async",
    cl::desc("Overlap the post-step replicate broadcast with the next forward"),
    cl::init(true), cl::cat(category));
cl::opt<unsigned> alignment("alignment",
                            cl::desc("Byte alignment of each param in a packed buffer"),
                            cl::init(256), cl::cat(category));
cl::opt<dmuon::CostModel> costModel(
    "cost-model", cl::desc("What the partition balances"),
    cl::init(dmuon::CostModel::flops),
    cl::values(clEnumValN(dmuon::CostModel::flops, "flops",
                          "Newton-Schulz flops of each matrix (default)"),
               clEnumValN(dmuon::CostModel::table, "table",
                          "measured NS seconds per matrix shape (--cost-table)")),
    cl::cat(category));
cl::opt<std::string> costTable(
    "cost-table",
    cl::desc("CSV 'rows,cols,seconds' of measured NS times per matrix shape "
             "(implies --cost-model=table)"),
    cl::value_desc("file"), cl::cat(category));
cl::opt<std::string> dataCarryingDims(
    "data-carrying-dims",
    cl::desc("Model-parallel mesh dims whose ranks see different tokens, comma-separated "
             "(default: ep and cp; '' for none)"),
    cl::value_desc("dims"), cl::cat(category));
cl::opt<std::string> deviceMemory(
    "device-memory",
    cl::desc("Check every rank's memory in the plan against a device of this size (80GiB, "
             "141GB, bytes) and warn where it does not fit"),
    cl::value_desc("size"), cl::cat(category));
cl::opt<std::string> clusterFile(
    "cluster",
    cl::desc("Check every rank's memory against the [device] memory of a cluster description "
             "(docs/cluster-format.md); with --mesh auto:N, the cluster the candidates are "
             "simulated on"),
    cl::value_desc("cluster.toml"), cl::cat(category));
cl::opt<bool> timePasses("time-passes", cl::desc("Time each pass and print a report"),
                         cl::init(false), cl::cat(category));
cl::opt<bool> verifyEach("verify-each",
                         cl::desc("Verify the plan of every stage with the readers' verifier "
                                  "(the final plan is always verified)"),
                         cl::init(false), cl::cat(category));

cl::OptionCategory optimCategory("Optimizer defaults recorded in the plan");
// One flag per scheduled hyper-parameter (common/HyperParams.def).
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                  \
  cl::opt<double> camel(flag, cl::desc(help), cl::init(def), cl::cat(optimCategory));
#include "common/HyperParams.def"
cl::opt<bool> nesterov("nesterov", cl::desc("Nesterov momentum"), cl::init(true),
                       cl::cat(optimCategory));
cl::opt<unsigned> nsSteps("ns-steps", cl::desc("Newton-Schulz iterations"), cl::init(5),
                          cl::cat(optimCategory));
cl::opt<bool> polarExpress("polar-express",
                           cl::desc("Use the Polar Express per-iteration coefficients"),
                           cl::init(false), cl::cat(optimCategory));
cl::opt<bool> matchRmsAdamW("match-rms-adamw",
                            cl::desc("LR scale 0.2*sqrt(max(m,n)) instead of sqrt(max(1,m/n))"),
                            cl::init(false), cl::cat(optimCategory));
cl::opt<double> qkClipTau(
    "qk-clip-tau",
    cl::desc("QK-Clip threshold on the per-head max attention logit (manifest qk_clip pairs)"),
    cl::init(100.0), cl::cat(optimCategory));

// The command line as dmuonc's library checks it (compiler/DriverOptions.h).
dmuon::DriverFlags readFlags() {
  dmuon::DriverFlags f;
  f.input = inputPath;
  f.format = inputFormat;
  f.mesh = meshSpec;
  f.output = outputPath;
  f.emit = emitKind;
  f.stopAfter = stopAfter;
  if (dataCarryingDims.getNumOccurrences())
    f.dataCarryingDims = dataCarryingDims.getValue();
  f.timePasses = timePasses;
  f.verifyEach = verifyEach;
  f.hookBoundary = hookBoundary;
  f.smallParamThreshold = smallParamThreshold;
  f.adamwRoute = adamwRoute;
  f.strictNames = strictNames;
  f.shardedThreshold = shardedThreshold;
  f.shardedThresholdGiven = shardedThreshold.getNumOccurrences() > 0;
  f.muonInclude = muonInclude;
  f.muonExclude = muonExclude;
  f.mode = mode;
  f.modeGiven = mode.getNumOccurrences() > 0;
  f.replicateAsync = replicateAsync;
  f.alignment = alignment;
  f.costModel = costModel;
  f.costModelGiven = costModel.getNumOccurrences() > 0;
  f.costTable = costTable;
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help) f.camel = camel;
#include "common/HyperParams.def"
  f.nesterov = nesterov;
  f.nsSteps = nsSteps;
  f.polarExpress = polarExpress;
  f.matchRmsAdamW = matchRmsAdamW;
  f.qkClipTau = qkClipTau;
  f.deviceMemory = deviceMemory;
  f.cluster = clusterFile;
  return f;
}

// --device-memory / --cluster: every rank's memory by category against the
// device's on stderr, and a warning naming where the largest rank peaks.
// False only when the cluster description cannot be read.
bool checkMemory(const dmuon::DriverConfig &config, const dmuon::PlanBuffer &plan,
                 dmuon::Diagnostics &diags) {
  double device = config.deviceMemory.value_or(0);
  if (!config.cluster.empty()) {
    dmuon::sim::Cluster cluster;
    if (!dmuon::sim::loadCluster(config.cluster, diags, cluster))
      return false;
    device = cluster.device.memoryBytes;
  } else if (!config.deviceMemory) {
    return true;
  }
  const auto &p = *dmuon::plan::GetPlan(plan.data());
  const dmuon::sim::MemoryReport m = dmuon::sim::checkMemory(p, device);
  errs() << "dmuonc: memory per rank against the device's "
         << dmuon::planfile::print::humanBytes(device, 4) << ":\n"
         << dmuon::sim::memoryTableText(p, device);
  if (m.peak.group >= 0 && p.hook_groups() &&
      static_cast<size_t>(m.peak.group) < p.hook_groups()->size())
    errs() << "dmuonc: rank " << m.largest.rank << "'s hook-group buffers peak in '"
           << p.hook_groups()->Get(static_cast<unsigned>(m.peak.group))->name()->str() << "' ("
           << m.peak.phase << ")\n";
  const std::string warning = dmuon::sim::memoryWarningText(p, m);
  if (!warning.empty())
    WithColor::warning(errs(), "dmuonc") << warning << "\n";
  else
    errs() << "dmuonc: every rank fits\n";
  return true;
}

// Plans (with --mesh auto:N: chooses the plan, compiler/AutoSearch.h),
// verifies what it wrote, and writes the chosen form.
int run(dmuon::Diagnostics &diags) {
  dmuon::DriverConfig config;
  if (!dmuon::configureDriver(readFlags(), diags, config))
    return 1;
  const dmuon::PlanForm emitForm = config.emit;
  const std::string &outputPath = config.output;
  if (emitForm == dmuon::PlanForm::Binary && outputPath == "-" &&
      sys::Process::StandardOutIsDisplayed()) {
    diags.error("refusing to write a binary plan to a terminal; use -o plan.bin or "
                "--emit=text");
    return 1;
  }
  std::optional<dmuon::PlanBuffer> plan;
  dmuon::Stage stage = dmuon::Stage::complete;
  if (config.autoMesh) {
    if (!dmuon::searchAutoMesh(config, plan, diags))
      return 1;
  } else {
    // Freeing a large model's strings and vectors took 5% of a Kimi K2
    // run, and the process ends right after: the model is left to the OS,
    // as clang leaves its ASTs (-disable-free); BuryPointer keeps it
    // reachable for LeakSanitizer.
    struct Buried {
      std::unique_ptr<dmuon::PlanModel> model = std::make_unique<dmuon::PlanModel>();
      ~Buried() { llvm::BuryPointer(std::move(model)); }
    } buried;
    dmuon::PlanModel &model = *buried.model;
    model.options = config.options;
    if (!dmuon::runPipeline(config.pipeline, model, diags))
      return 1;
    NamedRegionTimer t("emit", "Write the plan", "dmuonc",
                       "dmuonc pass execution timing report", config.pipeline.timePasses);
    plan.emplace(dmuon::writePlan(model));
    stage = model.stage;
  }
  std::string printed;
  {
    NamedRegionTimer t("verify", "Verify the plan", "dmuonc",
                       "dmuonc pass execution timing report", config.pipeline.timePasses);
    const std::string err = dmuon::verifyWrittenPlan(*plan, stage);
    if (!err.empty()) {
      diags.error("internal error: the plan dmuonc wrote does not verify: " + err);
      return 1;
    }
  }
  {
    NamedRegionTimer t("print", "Print the plan", "dmuonc",
                       "dmuonc pass execution timing report", config.pipeline.timePasses);
    if (emitForm != dmuon::PlanForm::Binary) {
      const auto *root = dmuon::plan::GetPlan(plan->data());
      printed = emitForm == dmuon::PlanForm::Text   ? dmuon::planfile::printText(*root)
                : emitForm == dmuon::PlanForm::Json ? dmuon::planfile::printJson(*root)
                                             : dmuon::planfile::printHtml(*root);
    }
  }
  if (!checkMemory(config, *plan, diags))
    return 1;
  std::error_code ec;
  ToolOutputFile out(outputPath, ec,
                     emitForm == dmuon::PlanForm::Binary ? sys::fs::OF_None : sys::fs::OF_Text);
  if (ec) {
    diags.fileError(outputPath, ec.message());
    return 1;
  }
  if (emitForm == dmuon::PlanForm::Binary)
    out.os().write(reinterpret_cast<const char *>(plan->data()), plan->size());
  else
    out.os() << printed;
  return dmuon::tools::keepOutput(out, outputPath, diags.toolName()) ? 0 : 1;
}

} // namespace

int dmuon::dmuoncMain(int argc, char **argv) {
  InitLLVM init(argc, argv);
  tools::treatBrokenPipeAsWriteError();
  cl::HideUnrelatedOptions({&category, &optimCategory});
  cl::SetVersionPrinter([](raw_ostream &os) {
    os << "dmuonc " DMUON_VERSION_STRING " (plan format " << DMUON_PLAN_FORMAT_MAJOR << "."
       << DMUON_PLAN_FORMAT_MINOR << ")\n";
  });
  tools::parseCommandLine(argc, argv, "dmuon planning compiler: model + mesh -> plan.bin\n",
                          "dmuonc");
  Diagnostics diags("dmuonc");
  try {
    return run(diags);
  } catch (const std::exception &e) {
    diags.error(Twine("internal error: ") + e.what());
    return 1;
  }
}
