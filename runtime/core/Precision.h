// Casts between the fp32 master and a packed buffer's dtype.
#ifndef DMUON_RUNTIME_CORE_PRECISION_H
#define DMUON_RUNTIME_CORE_PRECISION_H

#include <cstdint>
#include <cstring>

namespace dmuon::rt {

// Round to nearest even, NaN kept quiet: what torch's .to(bfloat16) does.
inline uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

} // namespace dmuon::rt

#endif
