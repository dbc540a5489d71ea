// hex64: how dmuon prints a 64-bit fingerprint or checksum, "0x" and 16
// lowercase hex digits.
//
// common/ is the one place for definitions that the compiler (dmuonc), the
// runtime (libdmuon) and the tools share. Its headers are header-only and
// need nothing but the C++ standard library and the FlatBuffers-generated
// plan header: no LLVM, no protobuf.
#ifndef DMUON_COMMON_HEX_H
#define DMUON_COMMON_HEX_H

#include <cstdint>
#include <cstdio>
#include <string>

namespace dmuon::common {

inline std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

} // namespace dmuon::common

#endif
