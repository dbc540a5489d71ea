// What one rank does in one training step, as the simulator sees it: per
// hook group the forward and backward compute and the collectives of the
// runtime's lifecycle (docs/runtime.md), then the optimizer step. dmuon's
// plan and the three baselines (AdamW, the two naive Muon schemes) are each
// lowered to this form (Programs.cpp) and timed by one engine (Engine.cpp).
#ifndef DMUON_SIM_PROGRAM_H
#define DMUON_SIM_PROGRAM_H

#include "sim/Cluster.h"

#include <string>
#include <vector>

namespace dmuon::sim {

// The runtime's streams: unshard broadcasts and all-gathers (high
// priority), reduces (high priority), replicate broadcasts and the
// phase-2 reduces over replicas (default priority).
enum class Stream { Unshard, Reduce, Replicate };
inline constexpr int kNumStreams = 3;

// One collective over `ranks` ranks moving `bytes` (the collective's
// buffer: docs/cluster-format.md, "Cost model"), on the inter-node network
// when its group spans nodes.
struct Transfer {
  CollKind kind = CollKind::Broadcast;
  int64_t ranks = 1;
  double bytes = 0;
  bool inter = false;
  int64_t count = 1; // collectives of this kind merged here (their latencies)
};

// Collectives issued together (a coalesced group) on one stream.
struct CommOp {
  Stream stream = Stream::Reduce;
  std::vector<Transfer> parts;
  bool empty() const;
  bool inter() const;
};

struct GroupWork {
  std::string name;
  double forward = 0, backward = 0; // seconds of compute
  CommOp unshard;                   // pre_forward (again in pre_backward under Z3)
  CommOp phase1;                    // post_backward
  CommOp phase2;                    // issued at the next group's post_backward
  CommOp replicate;                 // after the step's owner update
};

// One piece of the optimizer step, in order.
struct StepItem {
  enum class Kind { Compute, Comm, Replicate } kind = Kind::Compute;
  std::string label;
  double seconds = 0; // Compute
  CommOp comm;        // Comm: blocking
  bool global = false; // Comm: every rank takes part (they meet there)
};

struct Program {
  std::vector<GroupWork> groups;
  std::vector<StepItem> step;
  bool z3 = true;
  bool replicateAsync = true;
  // dmuon's reduce pipeline (post_backward waits for the phase 1 of the
  // previous group and the phase 2 of the one before); otherwise
  // gradients' collectives are only waited for when backward ends (DDP).
  bool pipelinedReduce = true;
  double nsSeconds = 0; // of the step, for the report
  // Seconds the first wait on each collective adds: the scheduling wait of
  // ranks that time-share processors (oversubscribedWait, Cluster.h).
  double collectiveWait = 0;
};

} // namespace dmuon::sim

#endif
