// Rules of the plan format that dmuonc enforces when it writes a plan and
// that the verifier (plan/verify) and the runtime check when they read one.
//
// common/ is the one place for definitions that the compiler (dmuonc), the
// runtime (libdmuon) and the tools share. Its headers are header-only and
// need nothing but the C++ standard library and the FlatBuffers-generated
// plan header: no LLVM, no protobuf.
#ifndef DMUON_COMMON_PLANRULES_H
#define DMUON_COMMON_PLANRULES_H

#include "dmuon/plan_generated.h"

#include <cstdint>
#include <string>

namespace dmuon::common {

// Bound on the elements of one param: keeps byte counts and flop costs exact
// in 64 bits.
inline constexpr int64_t kMaxElements = int64_t(1) << 48;

// The most dims a param may have: the C ABI's fixed-size shapes
// (DMUON_MAX_DIMS in dmuon.h) hold this many, and one limit holds from
// dmuonc to the host, which must learn every param's shape to bind it.
inline constexpr int kMaxParamDims = 8;

// The most any byte count, offset or per-rank figure of a plan may be. Below
// 2^63 with room to spare, so that the sum of two such values (an offset
// plus a size, one figure plus another) never overflows 64 bits.
inline constexpr int64_t kMaxPlanByteCount = int64_t(1) << 62;

// The most ranks a plan's mesh (and a checkpoint's world_size) may have.
inline constexpr int64_t kMaxWorldSize = int64_t(1) << 30;

// Bytes per element of a reduce buffer: gradients are averaged in fp32, so
// the owner's fp32 master sees an fp32 mean (a param's reduce_bytes).
inline constexpr int64_t kReduceElementBytes = 4;

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

// SOAP's and Shampoo's refresh period in steps, and the longest side they
// precondition (each side's statistics are dim x dim fp32 matrices, and a
// refresh decomposes them): dmuonc's flags and the plan's options.
inline constexpr int64_t kMaxPreconditionFrequency = 1'000'000;
inline constexpr int64_t kMaxPreconditionDim = 65536;
constexpr bool preconditionFrequencyInRange(int64_t f) {
  return f >= 1 && f <= kMaxPreconditionFrequency;
}
constexpr bool maxPreconditionDimInRange(int64_t d) { return d >= 1 && d <= kMaxPreconditionDim; }
inline std::string preconditionFrequencyRangeText() {
  return "between 1 and " + std::to_string(kMaxPreconditionFrequency);
}
inline std::string maxPreconditionDimRangeText() {
  return "between 1 and " + std::to_string(kMaxPreconditionDim);
}

// Whether a model-parallel mesh dim of this name carries data (its
// coordinates see different tokens) unless the mesh says otherwise.
inline bool carriesDataByDefault(const std::string &name) { return name == "ep" || name == "cp"; }

// Whether a mesh dim of this name is a pipeline (stage) dim unless the mesh
// gives another kind: each coordinate holds different params.
inline bool isStageByDefault(const std::string &name) { return name == "pp"; }

// Bytes per element of a plan dtype; 0 for a value the schema does not know.
constexpr int64_t dtypeBytes(plan::DType t) {
  switch (t) {
  case plan::DType::f32:
    return 4;
  case plan::DType::bf16:
  case plan::DType::f16:
    return 2;
  case plan::DType::f64:
    return 8;
  }
  return 0;
}

} // namespace dmuon::common

#endif
