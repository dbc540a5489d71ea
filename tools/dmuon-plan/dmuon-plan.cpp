// dmuon-plan: inspect a plan.bin. Verifies the plan (identifier, FlatBuffers
// verifier, format version, fingerprint, semantic checks), then prints it as
// text, JSON or a short summary — the same printers dmuonc --emit uses — or
// compares two plans (`dmuon-plan diff a.bin b.bin`).
#include "ToolSupport.h"
#include "common/Hex.h"
#include "dmuon/plan_version.h"
#include "plan/PlanFile.h"
#include "plan/print/PlanPrinter.h"
#include "sim/Simulate.h"
#include "support/OutputFile.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace llvm;
using namespace dmuon;

namespace {

cl::OptionCategory category("dmuon-plan options");

cl::list<std::string> positional(cl::Positional, cl::OneOrMore,
                                 cl::desc("<plan.bin> | diff <a.bin> <b.bin>"),
                                 cl::cat(category));

cl::opt<PlanForm> emit("emit", cl::desc("Output form"), cl::init(PlanForm::Text),
                       cl::values(clEnumValN(PlanForm::Text, "text",
                                             "line-oriented text (default)"),
                                  clEnumValN(PlanForm::Json, "json", "JSON (docs/plan-format.md)"),
                                  clEnumValN(PlanForm::Summary, "summary",
                                             "a few human-readable lines"),
                                  clEnumValN(PlanForm::Html, "html",
                                             "self-contained HTML report")),
                       cl::cat(category));

cl::opt<std::string> outputFile("o", cl::desc("Output file ('-' for stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(category));

cl::opt<bool> verifyOnly("verify-only",
                         cl::desc("Only verify the plan; print '<path>: ok (...)'"),
                         cl::cat(category));

cl::opt<bool> requireComplete(
    "require-complete",
    cl::desc("Refuse plans captured with --stop-after (as the runtime does)"),
    cl::cat(category));

cl::opt<std::string> simulateCluster(
    "simulate",
    cl::desc("Predict the step time of the plan's busiest rank and of AdamW and naive Muon on "
             "the cluster a TOML file describes (docs/cluster-format.md); --emit=text|json|html"),
    cl::value_desc("cluster.toml"), cl::cat(category));

// Override the cluster's [pipeline] table, so one description compares
// schedules and micro-batch counts.
cl::opt<std::string> pipelineSchedule(
    "pipeline-schedule",
    cl::desc("With --simulate, a plan with pipeline stages runs this schedule (1f1b or gpipe) "
             "instead of the cluster's [pipeline] schedule"),
    cl::value_desc("1f1b|gpipe"), cl::cat(category));
cl::opt<int64_t> microBatches(
    "micro-batches",
    cl::desc("With --simulate, a plan with pipeline stages runs this many micro-batches (1 to "
             "65536) instead of the cluster's [pipeline] micro_batches"),
    cl::value_desc("M"), cl::init(0), cl::cat(category));

constexpr const char *kTool = "dmuon-plan";

int fail(const std::string &path, const std::string &msg) {
  WithColor::error(errs(), kTool) << "'" << path << "': " << msg << "\n";
  return 1;
}

// Reads and verifies; on failure prints the error and returns false.
bool load(const std::string &path, std::vector<uint8_t> &buf) {
  std::string err = planfile::readFile(path, buf);
  if (err.empty())
    err = planfile::verifyPlan(buf.data(), buf.size(), requireComplete);
  if (!err.empty()) {
    fail(path, err);
    return false;
  }
  return true;
}

using common::hex64;

std::vector<std::string> lines(const std::string &s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b < s.size()) {
    size_t e = s.find('\n', b);
    if (e == std::string::npos)
      e = s.size();
    out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// The "key" of a text line for the diff: params by name, other records by
// their leading words, so a changed value shows as '-'/'+' of the same record.
std::string lineKey(const std::string &l) {
  size_t sp = l.find(' ');
  if (sp == std::string::npos)
    return l;
  size_t sp2 = l.find(' ', sp + 1);
  return l.substr(0, sp2);
}

// Diff of the text forms. Lines that match in order are skipped; otherwise a
// record present in both is shown as -old/+new, and records only on one side
// as - or +. Linear in the plan size (records are keyed, not aligned by LCS).
int diffPlans(const std::string &a, const std::vector<uint8_t> &ba, const std::string &b,
              const std::vector<uint8_t> &bb, raw_ostream &os) {
  std::vector<std::string> la = lines(planfile::printText(*plan::GetPlan(ba.data())));
  std::vector<std::string> lb = lines(planfile::printText(*plan::GetPlan(bb.data())));
  // Section of each line (the last "name:" header seen) + key.
  auto keyed = [](const std::vector<std::string> &ls) {
    std::vector<std::string> keys;
    std::string section;
    for (const std::string &l : ls) {
      if (!l.empty() && l.back() == ':' && l.find(' ') == std::string::npos)
        section = l;
      keys.push_back(section + "\t" + lineKey(l));
    }
    return keys;
  };
  std::vector<std::string> ka = keyed(la), kb = keyed(lb);
  std::map<std::string, std::vector<size_t>> inB, inA;
  for (size_t i = 0; i < kb.size(); ++i)
    inB[kb[i]].push_back(i);
  for (size_t i = 0; i < ka.size(); ++i)
    inA[ka[i]].push_back(i);
  std::map<std::string, size_t> usedB, usedA;
  std::vector<bool> matchedB(lb.size(), false);
  int changes = 0;
  os << "--- " << a << "\n+++ " << b << "\n";
  for (size_t i = 0; i < la.size(); ++i) {
    if (la[i].rfind("; fingerprint", 0) == 0)
      continue;
    size_t &u = usedB[ka[i]];
    auto it = inB.find(ka[i]);
    if (it != inB.end() && u < it->second.size()) {
      size_t j = it->second[u++];
      matchedB[j] = true;
      if (la[i] != lb[j]) {
        os << "-" << la[i] << "\n+" << lb[j] << "\n";
        ++changes;
      }
    } else {
      os << "-" << la[i] << "\n";
      ++changes;
    }
  }
  for (size_t j = 0; j < lb.size(); ++j)
    if (!matchedB[j] && lb[j].rfind("; fingerprint", 0) != 0) {
      os << "+" << lb[j] << "\n";
      ++changes;
    }
  if (changes == 0)
    os << "plans are equivalent (fingerprints " << hex64(plan::GetPlan(ba.data())->fingerprint())
       << ", " << hex64(plan::GetPlan(bb.data())->fingerprint()) << ")\n";
  return changes == 0 ? 0 : 2;
}

// --simulate: the step prediction and memory check; a plan that does not fit
// the device gets a warning naming the hook group where its buffers peak.
int simulate(const plan::Plan &p, Diagnostics &diags) {
  if (emit != PlanForm::Text && emit != PlanForm::Json && emit != PlanForm::Html) {
    WithColor::error(errs(), kTool) << "--simulate prints text, json or html (--emit=text|json|html)\n";
    return 1;
  }
  sim::Cluster cluster;
  if (!sim::loadCluster(simulateCluster, diags, cluster))
    return 1;
  if (pipelineSchedule.getNumOccurrences()) {
    if (pipelineSchedule != "1f1b" && pipelineSchedule != "gpipe") {
      WithColor::error(errs(), kTool)
          << "--pipeline-schedule is 1f1b or gpipe, not '" << pipelineSchedule << "'\n";
      return 1;
    }
    cluster.pipeline.schedule = pipelineSchedule == "gpipe" ? sim::PipelineSchedule::GPipe
                                                            : sim::PipelineSchedule::OneFOneB;
  }
  if (microBatches.getNumOccurrences()) {
    if (microBatches < 1 || microBatches > sim::kMaxMicroBatches) {
      WithColor::error(errs(), kTool) << "--micro-batches must be from 1 to "
                                      << sim::kMaxMicroBatches << ", not " << microBatches << "\n";
      return 1;
    }
    cluster.pipeline.microBatches = microBatches;
  }
  if (!checkOutputIsNotInput(outputFile,
                             {{cluster.device.nsTablePath, "the cluster's ns_cost_table"}}, diags))
    return 1;
  sim::Simulation result;
  std::string error;
  if (!sim::simulate(p, cluster, simulateCluster, result, error))
    return fail(simulateCluster, error);
  const std::string warning = sim::memoryWarningText(p, result.memory);
  if (!warning.empty())
    WithColor::warning(errs(), kTool) << warning << "\n";
  const std::string printed = emit == PlanForm::Html
                                  ? sim::insertSimulationHtml(planfile::printHtml(p), result)
                              : emit == PlanForm::Json ? sim::printSimulationJson(result)
                                                       : sim::printSimulationText(result);
  return writeOutputFile(outputFile, printed, diags) ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM x(argc, argv);
  tools::treatBrokenPipeAsWriteError();
  cl::HideUnrelatedOptions(category);
  tools::parseCommandLine(argc, argv,
                          "dmuon-plan: verify and print a dmuon plan (plan.bin)\n\n"
                          "  dmuon-plan plan.bin [--emit=text|json|summary|html] [-o out]\n"
                          "  dmuon-plan plan.bin --verify-only\n"
                          "  dmuon-plan diff a.bin b.bin   (exit 0 if equivalent, 2 if not)\n",
                          kTool);

  bool isDiff = positional.size() == 3 && positional[0] == "diff";
  if (!isDiff && positional.size() != 1) {
    WithColor::error(errs(), kTool)
        << "expected one plan file, or 'diff <a.bin> <b.bin>' (see --help)\n";
    return 1;
  }

  if ((pipelineSchedule.getNumOccurrences() || microBatches.getNumOccurrences()) &&
      simulateCluster.empty()) {
    WithColor::error(errs(), kTool)
        << "--pipeline-schedule and --micro-batches set the simulated pipeline; give --simulate\n";
    return 1;
  }

  // Refused before anything is read: the printout written over the plan
  // (or the cluster) would destroy it.
  Diagnostics diags(kTool);
  std::vector<RunInput> inputs;
  for (size_t i = isDiff ? 1 : 0; i < positional.size(); ++i)
    inputs.push_back({positional[i], "the plan"});
  inputs.push_back({simulateCluster, "--simulate"});
  if (!checkOutputIsNotInput(outputFile, inputs, diags))
    return 1;

  // Everything is read and checked before the output is written: a failed
  // run leaves a previous output file as it was (writeOutputFile).
  if (isDiff) {
    std::vector<uint8_t> ba, bb;
    if (!load(positional[1], ba) || !load(positional[2], bb))
      return 1;
    std::string printed;
    raw_string_ostream printedStream(printed);
    const int rc = diffPlans(positional[1], ba, positional[2], bb, printedStream);
    printedStream.flush();
    return writeOutputFile(outputFile, printed, diags) ? rc : 1;
  }

  const std::string &path = positional[0];
  std::vector<uint8_t> buf;
  if (!load(path, buf))
    return 1;
  const plan::Plan &p = *plan::GetPlan(buf.data());
  if (!simulateCluster.empty())
    return simulate(p, diags);
  std::string printed;
  if (verifyOnly) {
    raw_string_ostream line(printed);
    line << path << ": ok (plan " << p.format_major() << "." << p.format_minor() << ", fingerprint "
         << hex64(p.fingerprint());
    if (p.stage() != plan::Stage::complete)
      line << ", stage " << plan::EnumNameStage(p.stage());
    line << ")\n";
  } else {
    switch (emit) {
    case PlanForm::Text:
      printed = planfile::printText(p);
      break;
    case PlanForm::Json:
      printed = planfile::printJson(p);
      break;
    case PlanForm::Summary:
      printed = planfile::printSummary(p);
      break;
    case PlanForm::Html:
      printed = planfile::printHtml(p);
      break;
    case PlanForm::Binary: // not among --emit's values: the plan is the input
      break;
    }
  }
  return writeOutputFile(outputFile, printed, diags) ? 0 : 1;
}
