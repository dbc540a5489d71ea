// dmuonc: the dmuon planning compiler driver. All work is in compiler/.
#include "Diagnostics.h"
#include "Pipeline.h"
#include "plan-print/PlanPrinter.h"
#include "PlanWriter.h"
#include "ToolSupport.h"
#include "common/HyperRanges.h"
#include "common/PlanRules.h"
#include "dmuon/plan_version.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Timer.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cstdio>
#include <exception>

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
    "mesh", cl::desc("Device mesh: '8', '2x4' (dp_replicate x dp_shard) or "
                     "'dp_replicate=2,dp_shard=2,tp=2'"),
    cl::value_desc("mesh"), cl::Required, cl::cat(category));
cl::opt<std::string> outputPath("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(category));

enum class EmitKind { Bin, Text, Json, Html };
cl::opt<EmitKind> emitKind(
    "emit", cl::desc("Output form"), cl::init(EmitKind::Bin),
    cl::values(clEnumValN(EmitKind::Bin, "bin", "binary plan (FlatBuffers)"),
               clEnumValN(EmitKind::Text, "text", "line-oriented text"),
               clEnumValN(EmitKind::Json, "json", "JSON"),
               clEnumValN(EmitKind::Html, "html",
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
cl::opt<bool> timePasses("time-passes", cl::desc("Time each pass and print a report"),
                         cl::init(false), cl::cat(category));
cl::opt<bool> verifyEach("verify-each",
                         cl::desc("Verify the plan of every stage with the readers' verifier "
                                  "(the final plan is always verified)"),
                         cl::init(false), cl::cat(category));

cl::OptionCategory optimCategory("Optimizer defaults recorded in the plan");
cl::opt<double> lr("lr", cl::desc("Muon learning rate"), cl::init(0.02), cl::cat(optimCategory));
cl::opt<double> momentum("momentum", cl::desc("Muon momentum"), cl::init(0.95),
                         cl::cat(optimCategory));
cl::opt<bool> nesterov("nesterov", cl::desc("Nesterov momentum"), cl::init(true),
                       cl::cat(optimCategory));
cl::opt<double> weightDecay("weight-decay", cl::desc("Muon decoupled weight decay"),
                            cl::init(0.0), cl::cat(optimCategory));
cl::opt<unsigned> nsSteps("ns-steps", cl::desc("Newton-Schulz iterations"), cl::init(5),
                          cl::cat(optimCategory));
cl::opt<bool> polarExpress("polar-express",
                           cl::desc("Use the Polar Express per-iteration coefficients"),
                           cl::init(false), cl::cat(optimCategory));
cl::opt<bool> matchRmsAdamW("match-rms-adamw",
                            cl::desc("LR scale 0.2*sqrt(max(m,n)) instead of sqrt(max(1,m/n))"),
                            cl::init(false), cl::cat(optimCategory));
cl::opt<double> adamwLr("adamw-lr", cl::desc("AdamW learning rate"), cl::init(1e-3),
                        cl::cat(optimCategory));
cl::opt<double> adamwWeightDecay("adamw-weight-decay", cl::desc("AdamW weight decay"),
                                 cl::init(0.0), cl::cat(optimCategory));
cl::opt<double> qkClipTau(
    "qk-clip-tau",
    cl::desc("QK-Clip threshold on the per-head max attention logit (manifest qk_clip pairs)"),
    cl::init(100.0), cl::cat(optimCategory));

bool buildOptions(dmuon::Diagnostics &diags, dmuon::PipelineOptions &popts,
                  dmuon::Options &o) {
  popts.input = inputPath;
  popts.format = inputFormat;
  popts.mesh = meshSpec;
  if (dataCarryingDims.getNumOccurrences())
    popts.dataCarryingDims = dataCarryingDims.getValue();
  popts.timePasses = timePasses;
  popts.verifyEach = verifyEach;
  if (!stopAfter.empty()) {
    std::optional<dmuon::Stage> s = dmuon::parseStage(stopAfter);
    if (!s || *s == dmuon::Stage::complete) {
      diags.error("unknown pass '" + stopAfter +
                  "' for --stop-after (expected frontend, select, validate, group, "
                  "partition, hooks or layout)");
      return false;
    }
    if (emitKind == EmitKind::Bin) {
      diags.error("--stop-after=" + stopAfter +
                  " captures a partial plan; print it with --emit=text, --emit=json or "
                  "--emit=html");
      return false;
    }
    popts.stopAfter = *s;
  }
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 65536) {
    diags.error("--alignment=" + std::to_string(alignment) +
                " must be a power of two no larger than 65536");
    return false;
  }
  if (!dmuon::common::nsStepsInRange(nsSteps)) {
    diags.error("--ns-steps=" + std::to_string(nsSteps) + " must be " +
                dmuon::common::nsStepsRangeText());
    return false;
  }
  if (smallParamThreshold > (1ULL << 48)) {
    diags.error("--small-param-threshold=" + std::to_string(smallParamThreshold) +
                " is too large");
    return false;
  }
  if (shardedThreshold > (1ULL << 48)) {
    diags.error("--sharded-threshold=" + std::to_string(shardedThreshold) + " is too large");
    return false;
  }
  if (shardedThreshold.getNumOccurrences() && adamwRoute != dmuon::RoutePolicy::by_size) {
    diags.error("--sharded-threshold applies only with --adamw-route=auto");
    return false;
  }
  if (!costTable.empty() && costModel.getNumOccurrences() &&
      costModel == dmuon::CostModel::flops) {
    diags.error("--cost-table needs --cost-model=table");
    return false;
  }
  if (!dmuon::common::kQkClipTauRange.contains(qkClipTau)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", qkClipTau.getValue());
    diags.error("--qk-clip-tau=" + std::string(text) + " must be a finite number > 0");
    return false;
  }
  // The optimizer defaults the plan records, in the ranges the verifier and
  // the runtime accept (common/HyperRanges.h).
  const std::pair<const cl::opt<double> *, const dmuon::common::HyperRange &> hypers[] = {
      {&lr, dmuon::common::kRateRange},
      {&momentum, dmuon::common::kDecayRange},
      {&weightDecay, dmuon::common::kRateRange},
      {&adamwLr, dmuon::common::kRateRange},
      {&adamwWeightDecay, dmuon::common::kRateRange}};
  bool hypersOk = true;
  for (const auto &[opt, range] : hypers) {
    std::string flag = "--" + opt->ArgStr.str();
    if (std::string e = dmuon::common::hyperRangeError(flag.c_str(), *opt, range); !e.empty()) {
      diags.error(e);
      hypersOk = false;
    }
  }
  if (!hypersOk)
    return false;
  if (costModel == dmuon::CostModel::table && costTable.empty()) {
    diags.error("--cost-model=table needs --cost-table=<file>");
    return false;
  }
  o.costModel = costTable.empty() ? costModel.getValue() : dmuon::CostModel::table;
  o.costTablePath = costTable;
  o.mode = mode;
  o.replicateAsync = replicateAsync;
  o.smallParamThreshold = static_cast<int64_t>(smallParamThreshold);
  o.routePolicy = adamwRoute;
  o.shardedThreshold = static_cast<int64_t>(shardedThreshold);
  o.hookBoundary = hookBoundary;
  o.muonInclude = muonInclude;
  o.muonExclude = muonExclude;
  o.alignment = static_cast<int>(alignment);
  o.optimizer.lr = lr;
  o.optimizer.momentum = momentum;
  o.optimizer.nesterov = nesterov;
  o.optimizer.weightDecay = weightDecay;
  o.optimizer.nsSteps = static_cast<int>(nsSteps);
  o.optimizer.polarExpress = polarExpress;
  o.optimizer.matchRmsAdamW = matchRmsAdamW;
  o.optimizer.adamwLr = adamwLr;
  o.optimizer.adamwWeightDecay = adamwWeightDecay;
  o.qkClipTau = qkClipTau;
  return true;
}

int run(dmuon::Diagnostics &diags) {
  dmuon::PipelineOptions popts;
  dmuon::PlanModel model;
  if (!buildOptions(diags, popts, model.options))
    return 1;
  if (emitKind == EmitKind::Bin && outputPath == "-" &&
      sys::Process::StandardOutIsDisplayed()) {
    diags.error("refusing to write a binary plan to a terminal; use -o plan.bin or "
                "--emit=text");
    return 1;
  }
  if (!dmuon::runPipeline(popts, model, diags))
    return 1;

  std::vector<uint8_t> plan;
  std::string printed;
  {
    NamedRegionTimer t("emit", "Write the plan", "dmuonc",
                       "dmuonc pass execution timing report", timePasses);
    plan = dmuon::writePlan(model);
  }
  {
    NamedRegionTimer t("verify", "Verify the plan", "dmuonc",
                       "dmuonc pass execution timing report", timePasses);
    const std::string err = dmuon::verifyWrittenPlan(plan, model.stage);
    if (!err.empty()) {
      diags.error("internal error: the plan dmuonc wrote does not verify: " + err);
      return 1;
    }
  }
  {
    NamedRegionTimer t("print", "Print the plan", "dmuonc",
                       "dmuonc pass execution timing report", timePasses);
    if (emitKind != EmitKind::Bin) {
      const auto *root = dmuon::plan::GetPlan(plan.data());
      printed = emitKind == EmitKind::Text   ? dmuon::planfile::printText(*root)
                : emitKind == EmitKind::Json ? dmuon::planfile::printJson(*root)
                                             : dmuon::planfile::printHtml(*root);
    }
  }
  std::error_code ec;
  ToolOutputFile out(outputPath, ec,
                     emitKind == EmitKind::Bin ? sys::fs::OF_None : sys::fs::OF_Text);
  if (ec) {
    diags.fileError(outputPath, ec.message());
    return 1;
  }
  if (emitKind == EmitKind::Bin)
    out.os().write(reinterpret_cast<const char *>(plan.data()), plan.size());
  else
    out.os() << printed;
  return dmuon::tools::keepOutput(out, outputPath, diags.toolName()) ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  dmuon::tools::treatBrokenPipeAsWriteError();
  cl::HideUnrelatedOptions({&category, &optimCategory});
  cl::SetVersionPrinter([](raw_ostream &os) {
    os << "dmuonc " DMUON_VERSION_STRING " (plan format " << DMUON_PLAN_FORMAT_MAJOR << "."
       << DMUON_PLAN_FORMAT_MINOR << ")\n";
  });
  dmuon::tools::parseCommandLine(argc, argv,
                                 "dmuon planning compiler: model + mesh -> plan.bin\n", "dmuonc");
  dmuon::Diagnostics diags("dmuonc");
  try {
    return run(diags);
  } catch (const std::exception &e) {
    diags.error(Twine("internal error: ") + e.what());
    return 1;
  }
}
