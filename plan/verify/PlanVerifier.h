// Verify-before-read: the FlatBuffers verifier, then the semantic checks
// that let libdmuon and the tools read a plan without further bounds checks.
#ifndef DMUON_PLAN_VERIFY_PLANVERIFIER_H
#define DMUON_PLAN_VERIFY_PLANVERIFIER_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace dmuon::planfile {

// FlatBuffers verifier, then semantic checks: identifier, known major
// version, fingerprint, mesh consistency, index ranges, segment bounds.
// Returns an empty string on success, else a message naming what is wrong.
// `requireComplete` refuses plans captured by --stop-after. Without
// `checkFingerprint` the fingerprint is not recomputed: only for a buffer
// stamped in this process (dmuonc checking what it wrote), where the hash,
// a byte-serial pass over tens of megabytes, could only agree.
std::string verifyPlan(const uint8_t *data, size_t size, bool requireComplete,
                       bool checkFingerprint = true);

} // namespace dmuon::planfile

#endif
