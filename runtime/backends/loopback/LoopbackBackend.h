// An in-process backend: N ranks are N threads of one process sharing a
// LoopbackFabric, so the executor's hook state machine and routes run, at
// any world size, in a unit test without MPI. Collectives match as MPI's do
// (the k-th collective a rank issues on a communicator meets the k-th of
// every other member) and the last member to arrive performs it on the
// members' buffers; `wait` blocks until it has. Sums run in group-rank
// order, so results are deterministic.
#ifndef DMUON_RUNTIME_BACKENDS_LOOPBACK_LOOPBACKBACKEND_H
#define DMUON_RUNTIME_BACKENDS_LOOPBACK_LOOPBACKBACKEND_H

#include "hal/Backend.h"

#include <memory>

namespace dmuon::rt {

class LoopbackFabric;

// The fabric `worldSize` ranks share; create one per simulated world.
std::shared_ptr<LoopbackFabric> createLoopbackFabric(int worldSize);

// Rank `rank`'s backend on `fabric`.
Status createLoopbackBackend(std::shared_ptr<LoopbackFabric> fabric, int rank,
                             std::unique_ptr<Backend> &out);

} // namespace dmuon::rt

#endif
