// A pipeline's micro-batches through its stages (docs/cluster-format.md,
// "Pipeline stages"): each stage runs its forwards and backwards in the
// schedule's order, a forward waits for the previous stage's forward of the
// same micro-batch and its activations' send, a backward for the next
// stage's backward and the send of its gradient back.
#ifndef DMUON_SIM_PIPELINE_H
#define DMUON_SIM_PIPELINE_H

#include "sim/Cluster.h"

#include <cstdint>
#include <vector>

namespace dmuon::sim {

// One stage's seconds per micro-batch.
struct StageCost {
  double forward = 0, backward = 0;
  double send = 0; // one micro-batch's activations to the next stage (its gradient back)
};

struct ScheduleRun {
  double makespan = 0;           // the first forward's start to the last backward's end
  std::vector<double> end;       // [stage]: its last backward's end
  std::vector<int64_t> inFlight; // [stage]: most micro-batches forwarded, not yet backwarded
  // The share of the makespan the stage with the most compute per micro-batch
  // idles: (P-1)/(M+P-1) for equal stages without sends, under either schedule.
  double bubble = 0;
};

// The op order of `stage` of `stages` under `s`: micro-batch i's forward as
// i, its backward as -1 - i.
std::vector<int64_t> scheduleOrder(PipelineSchedule s, int64_t stages, int64_t stage,
                                   int64_t microBatches);

ScheduleRun runSchedule(PipelineSchedule s, int64_t microBatches,
                        const std::vector<StageCost> &stages);

} // namespace dmuon::sim

#endif
