// Reading a plan: verify-before-read. Shared by libdmuon and dmuon-plan; links
// no LLVM and no protobuf.
#ifndef DMUON_RUNTIME_PLAN_PLANFILE_H
#define DMUON_RUNTIME_PLAN_PLANFILE_H

#include "dmuon/plan_generated.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon::planfile {

// FNV-1a 64 over `size` bytes.
uint64_t fnv1a64(const uint8_t *data, size_t size);

// Fingerprint of a finished plan buffer: the hash of the buffer with its
// fingerprint field at 0. Returns false if the buffer has no fingerprint field.
bool computeFingerprint(const uint8_t *data, size_t size, uint64_t &out);

// Stamps the fingerprint into a freshly built buffer (the writer's side).
bool stampFingerprint(uint8_t *data, size_t size);

// FlatBuffers verifier, then semantic checks: identifier, known major
// version, fingerprint, mesh consistency, index ranges, segment bounds.
// Returns an empty string on success, else a message naming what is wrong.
// `requireComplete` refuses plans captured by --stop-after.
std::string verifyPlan(const uint8_t *data, size_t size, bool requireComplete);

// Reads a whole file. Returns an empty string on success, else a message.
std::string readFile(const std::string &path, std::vector<uint8_t> &out);

} // namespace dmuon::planfile

#endif
