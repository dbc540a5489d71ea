// How a pipelined host orders a stage's micro-batches (docs/runtime.md,
// "Pipeline stages"): all forwards then all backwards (GPipe), or after
// P - 1 - s warm-up forwards on stage s one forward and one backward in turn
// (1F1B). Header-only; the pipelined tests' hosts share it.
#ifndef DMUON_HOSTS_TINY_PIPELINESCHEDULE_H
#define DMUON_HOSTS_TINY_PIPELINESCHEDULE_H

#include <algorithm>
#include <utility>
#include <vector>

namespace tiny {

enum class Schedule { GPipe, OneFOneB };

// Stage `stage` of `stages` over `m` micro-batches: its (forward?,
// micro-batch) sequence.
inline std::vector<std::pair<bool, int>> stageOrder(Schedule schedule, int stage, int stages,
                                                    int m) {
  std::vector<std::pair<bool, int>> order;
  if (schedule == Schedule::GPipe) {
    for (int j = 0; j < m; ++j)
      order.push_back({true, j});
    for (int j = 0; j < m; ++j)
      order.push_back({false, j});
    return order;
  }
  const int warm = std::min(stages - 1 - stage, m);
  int f = 0, b = 0;
  for (; f < warm; ++f)
    order.push_back({true, f});
  while (b < m) {
    if (f < m)
      order.push_back({true, f++});
    order.push_back({false, b++});
  }
  return order;
}

} // namespace tiny

#endif
