// What the compiler's unit tests share: every pass run on a manifest held in
// a string, and the verifier's verdict on the plan it writes.
#ifndef DMUON_TEST_UNIT_COMPILESUPPORT_H
#define DMUON_TEST_UNIT_COMPILESUPPORT_H

#include "support/Diagnostics.h"
#include "Frontend.h"
#include "Passes.h"
#include "PlanWriter.h"
#include "plan/PlanFile.h"

#include <string>
#include <vector>

namespace dmuon::unittest {

// Runs every pass on `manifest` (with the options already set in `model`);
// `errors` gets the diagnostics.
inline bool compile(const std::string &manifest, const std::string &mesh, PlanModel &model,
                    std::string &errors) {
  llvm::raw_string_ostream os(errors);
  Diagnostics diags("dmuonc", os);
  bool ok = parseMesh(mesh, model.mesh, diags) &&
            loadTomlManifestFromBuffer(manifest, "test.toml", model, diags);
  for (auto pass : {runSelect, runValidate, runGroup, runPipelineStages, runPartition, runHooks,
                    runLayout, runRankFigures})
    ok = ok && pass(model, diags) && !diags.hasErrors();
  model.stage = Stage::complete;
  os.flush();
  return ok;
}

inline std::string verifyComplete(const std::vector<uint8_t> &b) {
  return planfile::verifyPlan(b.data(), b.size(), true);
}

inline bool contains(const std::string &s, const std::string &sub) {
  return s.find(sub) != std::string::npos;
}

} // namespace dmuon::unittest

#endif
