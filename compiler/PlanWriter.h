// Serializes a PlanModel into the FlatBuffers plan (include/dmuon/plan.fbs).
// Deterministic: the same model gives the same bytes.
#ifndef DMUON_COMPILER_PLANWRITER_H
#define DMUON_COMPILER_PLANWRITER_H

#include "Model.h"

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <vector>

namespace dmuon {

// A written plan: the builder's own buffer, handed over without a copy (a
// large plan is tens of megabytes). Converts to a byte vector for callers
// that edit a copy (tests).
class PlanBuffer {
public:
  explicit PlanBuffer(flatbuffers::DetachedBuffer bytes) : bytes_(std::move(bytes)) {}
  const uint8_t *data() const { return bytes_.data(); }
  uint8_t *data() { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  operator std::vector<uint8_t>() const { return {data(), data() + size()}; }

private:
  flatbuffers::DetachedBuffer bytes_;
};

// Writes everything the model's stage has computed, then stamps the
// fingerprint (FNV-1a 64 of the buffer with the fingerprint field at 0).
PlanBuffer writePlan(const PlanModel &model);

// The written plan checked by the verifier libdmuon and dmuon-plan read it
// with (a partial plan of an earlier stage as such): "" if it passes, else
// what is wrong. dmuonc never hands out a plan its own readers refuse. Its
// fingerprint is not recomputed: writePlan stamped it.
std::string verifyWrittenPlan(const PlanBuffer &plan, Stage stage);

} // namespace dmuon

#endif
