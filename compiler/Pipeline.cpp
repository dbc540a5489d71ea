#include "Pipeline.h"

#include "support/CostTable.h"
#include "Passes.h"
#include "PlanWriter.h"

#include "llvm/Support/Timer.h"

#include <iterator>
#include <optional>

namespace dmuon {

namespace {

// A pass that computes a stage, or a check (no stage: it changes nothing,
// so there is nothing to stop after or to verify).
struct PassEntry {
  std::optional<Stage> stage;
  bool (*run)(PlanModel &, Diagnostics &);
  const char *description;
  const char *timerName;
};

constexpr PassEntry kPasses[] = {
    {Stage::select, runSelect, "Select Muon/AdamW roles", "select"},
    {Stage::validate, runValidate, "Validate shapes and placements", "validate"},
    {Stage::group, runGroup, "Group params by sharding", "group"},
    {std::nullopt, runCheckPlacements, "Check supported placements", "check-placements"},
    // Part of the partition's input (no stage of its own: --stop-after=
    // partition shows what it chose).
    {std::nullopt, runPipelineStages, "Assign params to pipeline stages", "pipeline-stages"},
    {Stage::partition, runPartition, "Partition units over owner slots", "partition"},
    {Stage::hooks, runHooks, "Choose hook boundaries", "hooks"},
    {Stage::layout, runLayout, "Lay out packed buffers", "layout"},
    // An analysis of the laid-out plan; its result is the complete plan.
    {Stage::complete, runRankFigures, "Compute per-rank figures", "rank-figures"},
};

// --verify-each: the stage's plan as the readers would see it.
bool verifyStage(const PlanModel &model, Diagnostics &diags, bool timing) {
  llvm::NamedRegionTimer t("verify-each", "Verify each stage's plan", "dmuonc",
                           "dmuonc pass execution timing report", timing);
  const std::string err = verifyWrittenPlan(writePlan(model), model.stage);
  if (err.empty())
    return true;
  diags.error(std::string("internal error: --verify-each: the plan after '") +
              stageName(model.stage) + "' does not verify: " + err);
  return false;
}

} // namespace

bool runFrontend(const PipelineOptions &opts, PlanModel &model, Diagnostics &diags) {
  bool timing = opts.timePasses;

  model.source = opts.input;
  if (!parseMesh(opts.mesh, model.mesh, diags, opts.dataCarryingDims))
    return false;
  if (model.options.costModel == CostModel::table &&
      !loadCostTable(model.options.costTablePath, diags, model.options.costTable))
    return false;
  {
    llvm::NamedRegionTimer t("frontend", "Parse the input model", "dmuonc",
                             "dmuonc pass execution timing report", timing);
    if (!loadModel(opts.input, opts.format, model, diags))
      return false;
  }
  model.stage = Stage::frontend;
  return !opts.verifyEach || verifyStage(model, diags, timing);
}

bool runPasses(const PipelineOptions &opts, PlanModel &model, Diagnostics &diags) {
  bool timing = opts.timePasses;
  if (opts.stopAfter == model.stage)
    return true;
  // The passes after the one that computed model.stage (a check runs with
  // the pass after it).
  size_t first = 0;
  if (model.stage != Stage::frontend)
    for (size_t i = 0; i < std::size(kPasses); ++i)
      if (kPasses[i].stage == model.stage)
        first = i + 1;
  for (size_t i = first; i < std::size(kPasses); ++i) {
    const PassEntry &p = kPasses[i];
    {
      llvm::NamedRegionTimer t(p.timerName, p.description, "dmuonc",
                               "dmuonc pass execution timing report", timing);
      if (!p.run(model, diags) || diags.hasErrors())
        return false;
    }
    if (!p.stage)
      continue;
    model.stage = *p.stage;
    if (opts.verifyEach && !verifyStage(model, diags, timing))
      return false;
    if (opts.stopAfter == *p.stage)
      return true;
  }
  return true;
}

bool runPipeline(const PipelineOptions &opts, PlanModel &model, Diagnostics &diags) {
  return runFrontend(opts, model, diags) && runPasses(opts, model, diags);
}

} // namespace dmuon
