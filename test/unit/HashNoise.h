// The tests' deterministic noise: a value in [-1, 1) per (id, salted step,
// element), a hash of the three (splitmix64's finalizer), so that gradients
// are full rank (a low-rank statistic leaves SOAP's basis arbitrary inside
// its null space) and the same on every rank, device and run. Shared by the
// loopback and MPI references (OptimizerReferences.h) and the CUDA-vs-CPU
// preconditioner runs (test/gpu/PreconditionerRun.h).
#ifndef DMUON_TEST_UNIT_HASHNOISE_H
#define DMUON_TEST_UNIT_HASHNOISE_H

#include <cstdint>

namespace dmuon::testhash {

// `saltedStep`: the step plus a caller's constant, so that two users draw
// different values.
inline float hashNoise(int id, int saltedStep, int64_t i) {
  uint64_t x = static_cast<uint64_t>(id + 1) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(saltedStep) * 0xC2B2AE3D27D4EB4Full ^
               static_cast<uint64_t>(i + 1) * 0x165667B19E3779F9ull;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  // 24 bits over [0, 2), less 1: exact in float.
  return static_cast<float>(x >> 40) / static_cast<float>(1 << 23) - 1.f;
}

} // namespace dmuon::testhash

#endif
