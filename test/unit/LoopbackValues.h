// The values the loopback tests feed every rank (the same on each rank) and
// the tiny model's plans they run (hosts/tiny).
#ifndef DMUON_TEST_UNIT_LOOPBACKVALUES_H
#define DMUON_TEST_UNIT_LOOPBACKVALUES_H

#include <cmath>
#include <cstdint>
#include <string>

namespace dmuon::rt {

// A value per (param, step, element), the same on every rank.
inline float valueOf(int param, int step, int64_t i) {
  return 0.01f * std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(param) +
                          0.71f * static_cast<float>(step));
}

inline std::string tinyPlan(const std::string &mesh) {
  return std::string(DMUON_TINY_PLAN_DIR) + "/tiny-" + mesh + ".plan";
}

} // namespace dmuon::rt

#endif
