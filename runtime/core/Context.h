// What every part of the executor works with: the plan, this rank's place in
// the mesh, the settings, device memory and math, collectives, and the
// counters of what was sent. The executor owns them; the parts borrow them.
#ifndef DMUON_RUNTIME_CORE_CONTEXT_H
#define DMUON_RUNTIME_CORE_CONTEXT_H

#include "hal/Backend.h"
#include "core/Config.h"
#include "hal/Device.h"
#include "core/LoadedPlan.h"
#include "core/Topology.h"

namespace dmuon::rt {

class CommCounters {
public:
  void count(dmuon_collective_t kind, uint64_t sent, uint64_t received) {
    c_.kinds[kind].sent += sent;
    c_.kinds[kind].received += received;
    c_.kinds[kind].calls += 1;
  }
  // A root that sends `bytes` to `peers` ranks, or one of them receiving.
  void countFanOut(dmuon_collective_t kind, bool root, int peers, uint64_t bytes) {
    if (root)
      count(kind, static_cast<uint64_t>(peers) * bytes, 0);
    else
      count(kind, 0, bytes);
  }
  // The mirror image: `peers` ranks send `bytes` each to a root.
  void countFanIn(dmuon_collective_t kind, bool root, int peers, uint64_t bytes) {
    if (root)
      count(kind, 0, static_cast<uint64_t>(peers) * bytes);
    else
      count(kind, bytes, 0);
  }
  const dmuon_comm_counters_t &get() const { return c_; }
  void reset() { c_ = {}; }

private:
  dmuon_comm_counters_t c_{};
};

// What this rank holds, by the categories of the plan's memory figures.
struct MemoryAccounts {
  MemoryAccount masters, momentum, values, adamMoments, grads, buffers;
};

struct Context {
  const LoadedPlan &plan;
  const Topology &topo;
  const Config &config;
  Device &device;
  Backend &backend;
  CommCounters &counters;
  MemoryAccounts &memory;
};

} // namespace dmuon::rt

#endif
