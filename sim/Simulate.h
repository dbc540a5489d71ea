// `dmuon-plan plan.bin --simulate=cluster.toml`: the predicted step of the
// plan's busiest rank and of the baselines on the same cluster, and the
// memory check (docs/cluster-format.md).
#ifndef DMUON_SIM_SIMULATE_H
#define DMUON_SIM_SIMULATE_H

#include "sim/Cluster.h"
#include "sim/Engine.h"
#include "sim/Memory.h"
#include "sim/Pipeline.h"
#include "sim/Programs.h"

#include <string>
#include <vector>

namespace dmuon::sim {

struct SchemeResult {
  std::string name;
  int64_t rank = 0; // the busiest rank (dmuon); 0 for a baseline
  StepTimes times;
};

// One pipeline stage of dmuon's step (docs/cluster-format.md, "Pipeline
// stages").
struct StageRow {
  int64_t ranks = 0;
  int64_t rank = 0; // its busiest rank: the longest step over the stage's layers
  StageCost cost;   // per micro-batch
  // The busiest rank's step over the stage's layers, its micro-batches' compute
  // back to back (the engine's; the schedule arranges that compute).
  StepTimes times;
  double end = 0;       // its last backward's end in the schedule
  int64_t inFlight = 0; // the most micro-batches' activations it holds
};

struct PipelineReport {
  int64_t stages = 1; // 1: the plan has no stages, and nothing below is set
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  int64_t microBatches = 0, hiddenSize = 0;
  double tokensPerMicroBatch = 0, activationBytes = 0; // one micro-batch's send
  double makespan = 0, bubble = 0;
  double flush = 0; // the last stage to finish its backward and hooks' waits
  std::vector<StageRow> rows;
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
  PipelineReport pipeline;
};

// The hidden size a plan's stages send between them: the most common length
// of its 1-D params (the norms'; of two as common, the longer); 0 without any.
int64_t inferHiddenSize(const plan::Plan &p);

// The pipelined step of a plan with stages from each stage's busiest rank's
// step over its layers (`perStage`) and what a micro-batch costs on each
// (`costs`): the schedule, then every stage's hooks' exposed waits after its
// last backward; the step's optimizer starts once every stage is done (the
// gradient norm all-reduce meets every rank) and lasts as long as the
// slowest stage's. The result is the slowest stage's rank and figures with
// that step as its total; `rows` (when given) gets every stage's.
SchemeResult pipelinedStep(const std::vector<SchemeResult> &perStage,
                           const std::vector<StageCost> &costs, PipelineSchedule schedule,
                           int64_t microBatches, PipelineReport *report);

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
