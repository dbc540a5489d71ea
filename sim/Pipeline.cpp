#include "sim/Pipeline.h"

#include <algorithm>

namespace dmuon::sim {

std::vector<int64_t> scheduleOrder(PipelineSchedule s, int64_t stages, int64_t stage,
                                   int64_t microBatches) {
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(2 * microBatches));
  const int64_t M = microBatches;
  // GPipe: every forward, then every backward. 1F1B (Megatron-LM's
  // non-interleaved schedule): P - 1 - k warm-up forwards, then one forward
  // and one backward in turn, then the remaining backwards.
  const int64_t warmup =
      s == PipelineSchedule::GPipe ? M : std::min(M, std::max<int64_t>(0, stages - 1 - stage));
  for (int64_t i = 0; i < warmup; ++i)
    order.push_back(i);
  for (int64_t i = 0; i < M - warmup; ++i) {
    order.push_back(warmup + i);
    order.push_back(-1 - i);
  }
  for (int64_t i = M - warmup; i < M; ++i)
    order.push_back(-1 - i);
  return order;
}

ScheduleRun runSchedule(PipelineSchedule s, int64_t microBatches,
                        const std::vector<StageCost> &stages) {
  ScheduleRun out;
  const int64_t P = static_cast<int64_t>(stages.size());
  const int64_t M = std::max<int64_t>(1, microBatches);
  if (P == 0)
    return out;
  std::vector<std::vector<int64_t>> order(static_cast<size_t>(P));
  for (int64_t k = 0; k < P; ++k)
    order[static_cast<size_t>(k)] = scheduleOrder(s, P, k, M);
  // [stage][micro-batch]: when its forward and backward end (-1: not yet).
  std::vector<std::vector<double>> fwdEnd(static_cast<size_t>(P),
                                          std::vector<double>(static_cast<size_t>(M), -1)),
      bwdEnd = fwdEnd;
  std::vector<size_t> next(static_cast<size_t>(P), 0);
  std::vector<double> busyUntil(static_cast<size_t>(P), 0);
  out.inFlight.assign(static_cast<size_t>(P), 0);
  std::vector<int64_t> live(static_cast<size_t>(P), 0);
  // Each pass runs every stage's ops whose inputs are ready, the stages in
  // ascending order on even passes (forwards flow down the pipeline in one)
  // and descending on odd ones (backwards flow up in one); both schedules
  // are deadlock-free, so every pass makes progress.
  for (bool progressed = true, down = true; progressed; down = !down) {
    progressed = false;
    for (int64_t j = 0; j < P; ++j) {
      const int64_t k = down ? j : P - 1 - j;
      const size_t ks = static_cast<size_t>(k);
      const StageCost &cost = stages[ks];
      while (next[ks] < order[ks].size()) {
        const int64_t op = order[ks][next[ks]];
        const bool fwd = op >= 0;
        const size_t i = static_cast<size_t>(fwd ? op : -1 - op);
        double ready = 0;
        if (fwd && k > 0) {
          const double prev = fwdEnd[ks - 1][i];
          if (prev < 0)
            break;
          ready = prev + stages[ks - 1].send;
        } else if (!fwd) {
          if (fwdEnd[ks][i] < 0)
            break;
          ready = fwdEnd[ks][i];
          if (k + 1 < P) {
            const double after = bwdEnd[ks + 1][i];
            if (after < 0)
              break;
            ready = std::max(ready, after + cost.send);
          }
        }
        const double begin = std::max(busyUntil[ks], ready);
        busyUntil[ks] = begin + (fwd ? cost.forward : cost.backward);
        (fwd ? fwdEnd : bwdEnd)[ks][i] = busyUntil[ks];
        live[ks] += fwd ? 1 : -1;
        out.inFlight[ks] = std::max(out.inFlight[ks], live[ks]);
        ++next[ks];
        progressed = true;
      }
    }
  }
  out.end = busyUntil;
  out.makespan = *std::max_element(busyUntil.begin(), busyUntil.end());
  size_t slowest = 0;
  for (size_t k = 1; k < stages.size(); ++k)
    if (stages[k].forward + stages[k].backward > stages[slowest].forward + stages[slowest].backward)
      slowest = k;
  const double busy = static_cast<double>(M) * (stages[slowest].forward + stages[slowest].backward);
  out.bubble = out.makespan > 0 ? std::max(0.0, 1 - busy / out.makespan) : 0;
  return out;
}

} // namespace dmuon::sim
