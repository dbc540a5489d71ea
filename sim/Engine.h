// The event simulation of one rank's training steps (docs/cluster-format.md,
// "Simulation"): the host's hook calls in order on one compute stream,
// collectives on the runtime's three streams, each network (intra-, inter-
// node) carrying one collective at a time in issue order.
#ifndef DMUON_SIM_ENGINE_H
#define DMUON_SIM_ENGINE_H

#include "sim/Cluster.h"
#include "sim/Program.h"

#include <string>
#include <vector>

namespace dmuon::sim {

// A span of the timeline, for the report's busiest-rank timeline.
struct Span {
  std::string what;  // "forward layers.0", "broadcast layers.1", ...
  int lane = 0;      // 0 compute, 1 + Stream
  double begin = 0, end = 0;
};

struct StepTimes {
  double total = 0;   // one steady-state step, start of forward to end of step()
  double compute = 0; // forward + backward
  double exposed = 0; // the compute stream waiting for collectives in the hooks
  double optimizer = 0; // step(): from the last post_backward to its return
  double ns = 0;      // Newton-Schulz inside the optimizer step
};

// Issue times of the collectives that couple ranks, per simulated step:
// the replicate broadcast of each hook group and the step's global
// collectives (by their index among the step's Comm items).
struct Arrivals {
  std::vector<std::vector<double>> replicate; // [step][group]
  std::vector<std::vector<double>> global;    // [step][comm item]
};

// Earliest starts imposed by the other ranks (their arrivals), same shape;
// empty: none.
using Bounds = Arrivals;

struct RankRun {
  StepTimes times;
  Arrivals arrivals;
  std::vector<Span> timeline; // the measured (second) step
};

// The simulator runs two steps and measures the second: the first's async
// replicate broadcasts then overlap the second's forward, as in training.
inline constexpr int kSimulatedSteps = 2;

RankRun runProgram(const Cluster &c, const Program &p, const Bounds *bounds,
                   bool keepTimeline);

} // namespace dmuon::sim

#endif
