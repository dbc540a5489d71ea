// `dmuon-plan plan.bin --simulate=cluster.toml`: the predicted step of the
// plan's busiest rank and of the baselines on the same cluster, and the
// memory check (docs/cluster-format.md).
#ifndef DMUON_SIM_SIMULATE_H
#define DMUON_SIM_SIMULATE_H

#include "sim/Cluster.h"
#include "sim/Engine.h"
#include "sim/Memory.h"
#include "sim/Programs.h"

#include <string>
#include <vector>

namespace dmuon::sim {

struct SchemeResult {
  std::string name;
  int64_t rank = 0; // the busiest rank (dmuon); 0 for a baseline
  StepTimes times;
};

struct Simulation {
  std::string clusterName, clusterPath;
  int64_t world = 0, nodes = 0, devicesPerNode = 0;
  ComputeSplit split;
  double tokensPerRank = 0, mfu = 0;
  double computeShare = 1; // of a processor per rank (processors_per_node)
  double collectiveWait = 0; // seconds per wait on a collective (oversubscribed_latency)
  SchemeResult dmuon;        // the mean step: SOAP's and Shampoo's refreshes amortized
  // Where the plan has SOAP or Shampoo matrices: their refresh period, and
  // its worst step, the one whose refreshes (at their phases) give the
  // slowest rank the longest optimizer step, simulated as dmuon is.
  RefreshPeriod refreshes;
  int64_t worstStep = 0; // of the period, counted from 0
  SchemeResult dmuonWorst;
  std::vector<SchemeResult> baselines; // adamw, naive all-reduce, naive all-gather
  std::vector<Span> timeline;          // dmuon's busiest rank
  MemoryReport memory;
};

// The most ranks a plan may have to be simulated: the simulator runs every
// rank's program, so its time and memory grow with the world (Llama-3.1-70B
// under --mesh auto:65536, 34 candidates: 83 s and 3 GB; 2^24 ranks would
// take tens of GB).
inline constexpr int64_t kMaxSimulatedRanks = 65536;

// Runs every rank's program twice: the second run starts each coupling
// collective (the step's global all-reduces, each column's replicate
// broadcasts) no earlier than the latest rank reached it in the first.
// Returns false with `error` set when the plan or cluster cannot be
// simulated (a plan without per-rank figures; more than kMaxSimulatedRanks
// ranks; a mesh spanning nodes on a cluster without an inter-node network).
bool simulate(const plan::Plan &p, const Cluster &c, const std::string &clusterPath,
              Simulation &out, std::string &error);

std::string printSimulationText(const Simulation &s);
std::string printSimulationJson(const Simulation &s);
// The HTML section (scheme table, the busiest rank's timeline as inline SVG)
// and the plan's HTML report with that section before its end.
std::string printSimulationHtml(const Simulation &s);
std::string insertSimulationHtml(std::string page, const Simulation &s);

} // namespace dmuon::sim

#endif
