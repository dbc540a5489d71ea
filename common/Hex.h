// hex64: how dmuon prints a 64-bit fingerprint or checksum, "0x" and 16
// lowercase hex digits; parseHex64 reads exactly that form back.
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

// True, with the value, when `s` is "0x" and exactly 16 hex digits (no sign,
// space or second "0x", which strtoull would take).
inline bool parseHex64(const std::string &s, uint64_t &out) {
  if (s.size() != 18 || s[0] != '0' || s[1] != 'x')
    return false;
  uint64_t v = 0;
  for (size_t i = 2; i < s.size(); ++i) {
    const char c = s[i];
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0)
      return false;
    v = v << 4 | static_cast<uint64_t>(digit);
  }
  out = v;
  return true;
}

} // namespace dmuon::common

#endif
