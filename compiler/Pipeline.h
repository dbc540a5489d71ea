// Runs frontend -> passes, stopping after a chosen pass (LLVM's -stop-after).
#ifndef DMUON_COMPILER_PIPELINE_H
#define DMUON_COMPILER_PIPELINE_H

#include "Diagnostics.h"
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

} // namespace dmuon

#endif
