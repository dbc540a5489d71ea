// dmuonc's command line and what a run does with it: the options (bound and
// checked by compiler/DriverFlags.cpp and DriverOptions.cpp), the pipeline,
// the plan's own verification, and the output in the chosen form.
#include "DmuoncMain.h"

#include "AutoSearch.h"
#include "DriverOptions.h"
#include "Pipeline.h"
#include "PlanWriter.h"
#include "ToolSupport.h"
#include "support/Diagnostics.h"
#include "support/OutputFile.h"

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

#include <exception>
#include <optional>
#include <utility>

using namespace llvm;

namespace {

cl::OptionCategory category("dmuonc options");

cl::OptionCategory optimCategory("Optimizer defaults recorded in the plan");

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
int run(const dmuon::DriverFlags &flags, dmuon::Diagnostics &diags) {
  dmuon::DriverConfig config;
  if (!dmuon::configureDriver(flags, diags, config))
    return 1;
  const dmuon::PlanForm emitForm = config.emit;
  const std::string &outputPath = config.output;
  // Refused before any work: the plan written over its own model, cost
  // table or cluster would destroy what it was made from.
  if (!dmuon::checkOutputIsNotInput(outputPath,
                                    {{flags.input, "the model"},
                                     {flags.costTable, "--cost-table"},
                                     {flags.cluster, "--cluster"}},
                                    diags))
    return 1;
  // The cluster's own cost table is an input too (read by the simulator of
  // --mesh auto:N), named relative to the description.
  if (!flags.cluster.empty()) {
    dmuon::sim::Cluster cluster;
    if (!dmuon::sim::loadCluster(flags.cluster, diags, cluster) ||
        !dmuon::checkOutputIsNotInput(
            outputPath, {{cluster.device.nsTablePath, "the cluster's ns_cost_table"}}, diags))
      return 1;
  }
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
    // The process ends right after, and freeing a large model's millions of
    // strings and vectors one by one is work for nothing: the model is left
    // to the OS, as clang leaves its ASTs (-disable-free); BuryPointer keeps
    // it reachable for LeakSanitizer.
    struct Buried {
      std::unique_ptr<dmuon::PlanModel> model = std::make_unique<dmuon::PlanModel>();
      ~Buried() { llvm::BuryPointer(std::move(model)); }
    } buried;
    dmuon::PlanModel &model = *buried.model;
    model.options = config.options;
    if (!dmuon::runPipeline(config.pipeline, model, diags))
      return 1;
    NamedRegionTimer t("emit", "Write the plan", "dmuonc", "dmuonc pass execution timing report",
                       config.pipeline.timePasses);
    plan.emplace(dmuon::writePlan(model));
    stage = model.stage;
  }
  std::string printed;
  {
    NamedRegionTimer t("verify", "Verify the plan", "dmuonc", "dmuonc pass execution timing report",
                       config.pipeline.timePasses);
    const std::string err = dmuon::verifyWrittenPlan(*plan, stage);
    if (!err.empty()) {
      diags.error("internal error: the plan dmuonc wrote does not verify: " + err);
      return 1;
    }
  }
  {
    NamedRegionTimer t("print", "Print the plan", "dmuonc", "dmuonc pass execution timing report",
                       config.pipeline.timePasses);
    if (emitForm != dmuon::PlanForm::Binary) {
      const auto *root = dmuon::plan::GetPlan(plan->data());
      printed = emitForm == dmuon::PlanForm::Text   ? dmuon::planfile::printText(*root)
                : emitForm == dmuon::PlanForm::Json ? dmuon::planfile::printJson(*root)
                                                    : dmuon::planfile::printHtml(*root);
    }
  }
  if (!checkMemory(config, *plan, diags))
    return 1;
  const StringRef contents =
      emitForm == dmuon::PlanForm::Binary
          ? StringRef(reinterpret_cast<const char *>(plan->data()), plan->size())
          : StringRef(printed);
  return dmuon::writeOutputFile(outputPath, contents, diags) ? 0 : 1;
}

} // namespace

int dmuon::dmuoncMain(int argc, char **argv) {
  InitLLVM init(argc, argv);
  tools::treatBrokenPipeAsWriteError();
  // As long-lived as the option globals they replace: LLVM's option registry
  // keeps pointers to the flags until exit.
  static DriverFlags flags;
  static OptionsBinder binder;
  bindDriverFlags(flags, binder, category, optimCategory);
  cl::HideUnrelatedOptions({&category, &optimCategory});
  cl::SetVersionPrinter([](raw_ostream &os) {
    os << "dmuonc " DMUON_VERSION_STRING " (plan format " << DMUON_PLAN_FORMAT_MAJOR << "."
       << DMUON_PLAN_FORMAT_MINOR << ")\n";
  });
  tools::parseCommandLine(argc, argv, "dmuon planning compiler: model + mesh -> plan.bin\n",
                          "dmuonc");
  Diagnostics diags("dmuonc");
  try {
    return run(flags, diags);
  } catch (const std::exception &e) {
    diags.error(Twine("internal error: ") + e.what());
    return 1;
  }
}
