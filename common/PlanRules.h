// Rules of the plan format that dmuonc enforces when it writes a plan and
// that the verifier (runtime/plan) and the runtime check when they read one.
//
// common/ is the one place for definitions that the compiler (dmuonc), the
// runtime (libdmuon) and the tools share. Its headers are header-only and
// need nothing but the C++ standard library and the FlatBuffers-generated
// plan header: no LLVM, no protobuf.
#ifndef DMUON_COMMON_PLANRULES_H
#define DMUON_COMMON_PLANRULES_H

#include <cstdint>
#include <string>

namespace dmuon::common {

// Bound on the elements of one param: keeps byte counts and flop costs exact
// in 64 bits.
inline constexpr int64_t kMaxElements = int64_t(1) << 48;

// Newton-Schulz iterations per step: dmuonc --ns-steps, a complete plan's
// options.optimizer.ns_steps and the runtime's dmuon_options.ns_steps.
inline constexpr int kMinNsSteps = 1;
inline constexpr int kMaxNsSteps = 100;
constexpr bool nsStepsInRange(int64_t steps) {
  return steps >= kMinNsSteps && steps <= kMaxNsSteps;
}
// "between 1 and 100", for messages about an ns_steps out of range.
inline std::string nsStepsRangeText() {
  return "between " + std::to_string(kMinNsSteps) + " and " + std::to_string(kMaxNsSteps);
}

} // namespace dmuon::common

#endif
