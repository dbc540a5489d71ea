// Verify-before-read: the FlatBuffers verifier, then the semantic checks
// that let libdmuon and the tools read a plan without further bounds checks.
#ifndef DMUON_RUNTIME_PLAN_PLANVERIFIER_H
#define DMUON_RUNTIME_PLAN_PLANVERIFIER_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace dmuon::planfile {

// FlatBuffers verifier, then semantic checks: identifier, known major
// version, fingerprint, mesh consistency, index ranges, segment bounds.
// Returns an empty string on success, else a message naming what is wrong.
// `requireComplete` refuses plans captured by --stop-after.
std::string verifyPlan(const uint8_t *data, size_t size, bool requireComplete);

} // namespace dmuon::planfile

#endif
