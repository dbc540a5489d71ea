// Runs frontend -> passes, stopping after a chosen pass (LLVM's -stop-after).
#ifndef DMUON_COMPILER_PIPELINE_H
#define DMUON_COMPILER_PIPELINE_H

#include "support/Diagnostics.h"
#include "Frontend.h"
#include "Model.h"

#include <optional>
#include <string>

namespace dmuon {

struct PipelineOptions {
  std::string input;
  InputFormat format = InputFormat::Auto;
  std::string mesh;
  // --data-carrying-dims: the model-parallel dims that carry data (unset:
  // each dim's default by name or its ":data"/":model" in the mesh).
  std::optional<std::string> dataCarryingDims;
  Stage stopAfter = Stage::complete;
  bool timePasses = false;
  // --verify-each: after the frontend and after every pass, write the plan
  // of that stage and run the readers' verifier on it (LLVM's -verify-each).
  bool verifyEach = false;
};

// Fills `model` (whose options the caller has set). On success model.stage is
// the last stage that ran. Returns false after reporting errors.
bool runPipeline(const PipelineOptions &opts, PlanModel &model, Diagnostics &diags);

// The two halves of runPipeline, for a driver that plans one model on
// several meshes (`--mesh auto:N`): the frontend parses the mesh and the
// input once; runPasses runs the passes after model.stage up to
// opts.stopAfter, so a copy of a model stopped after one pass continues
// from there (the passes before rank-figures do not read options.mode, so
// a laid-out model can be completed once per mode).
bool runFrontend(const PipelineOptions &opts, PlanModel &model, Diagnostics &diags);
bool runPasses(const PipelineOptions &opts, PlanModel &model, Diagnostics &diags);

} // namespace dmuon

#endif
