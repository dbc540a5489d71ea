// Serializes a PlanModel into the FlatBuffers plan (include/dmuon/plan.fbs).
// Deterministic: the same model gives the same bytes.
#ifndef DMUON_COMPILER_PLANWRITER_H
#define DMUON_COMPILER_PLANWRITER_H

#include "Model.h"

#include <cstdint>
#include <vector>

namespace dmuon {

// Writes everything the model's stage has computed, then stamps the
// fingerprint (FNV-1a 64 of the buffer with the fingerprint field at 0).
std::vector<uint8_t> writePlan(const PlanModel &model);

// The written plan checked by the verifier libdmuon and dmuon-plan read it
// with (a partial plan of an earlier stage as such): "" if it passes, else
// what is wrong. dmuonc never hands out a plan its own readers refuse.
std::string verifyWrittenPlan(const std::vector<uint8_t> &plan, Stage stage);

} // namespace dmuon

#endif
