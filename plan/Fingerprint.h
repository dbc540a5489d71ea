// FNV-1a 64 and the plan fingerprint: the hash of a plan buffer with its
// fingerprint field at zero. dmuonc stamps it (stampFingerprint) and every
// reader checks it (verifyPlan); the runtime also hashes checkpoints with
// fnv1a64.
#ifndef DMUON_PLAN_FINGERPRINT_H
#define DMUON_PLAN_FINGERPRINT_H

#include <cstddef>
#include <cstdint>

namespace dmuon::planfile {

// FNV-1a 64 over `size` bytes.
uint64_t fnv1a64(const uint8_t *data, size_t size);

// Fingerprint of a finished plan buffer: the hash of the buffer with its
// fingerprint field at 0. Returns false if the buffer has no fingerprint field.
bool computeFingerprint(const uint8_t *data, size_t size, uint64_t &out);

// Stamps the fingerprint into a freshly built buffer (the writer's side).
bool stampFingerprint(uint8_t *data, size_t size);

} // namespace dmuon::planfile

#endif
