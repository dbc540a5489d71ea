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

} // namespace dmuon

#endif
