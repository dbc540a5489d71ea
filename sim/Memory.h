// Memory feasibility (docs/cluster-format.md, "Memory"): every rank's
// memory by the plan's categories against the device's, and where in the
// step a rank's hook-group buffers peak.
#ifndef DMUON_SIM_MEMORY_H
#define DMUON_SIM_MEMORY_H

#include "dmuon/plan_generated.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon::sim {

// Where the buffers peak: the hook group whose hook makes the peak and
// which hook it is.
struct BufferPeak {
  int64_t bytes = 0;
  int group = -1;      // -1: no hook groups
  std::string phase;   // "forward", "backward", "replicate"
};

// The executor's buffers through one step for ranks of shard column `s` on
// pipeline stage `stage` (0 without stages), as the plan's
// RankFigures.peak_buffer_bytes counts them (the same trace: docs/dmuonc.md,
// "Routes"), with where the peak falls.
BufferPeak tracePeakBuffers(const plan::Plan &p, int64_t s, int64_t stage = 0);

struct RankMemory {
  int64_t rank = -1;
  int64_t total = 0; // memory_bytes
  bool fits = true;
};

struct MemoryReport {
  double deviceBytes = 0;
  RankMemory largest;     // the rank with the most memory
  int64_t ranksOver = 0;  // ranks whose memory exceeds the device's
  BufferPeak peak;        // the largest rank's buffer peak
  bool traceMatches = true; // the trace found the plan's peak figure
};

MemoryReport checkMemory(const plan::Plan &p, double deviceBytes);

// One line per rank (the first `maxRows`, then the largest rank): its bytes
// in every memory category, the total against the device's, fits or over
// by how much (dmuonc --device-memory, docs/dmuonc.md).
std::string memoryTableText(const plan::Plan &p, double deviceBytes, size_t maxRows = 64);
// The warning when ranks do not fit: how many, the largest, the hook group
// where its buffers peak, and what would lower it; empty when all fit.
std::string memoryWarningText(const plan::Plan &p, const MemoryReport &m);

} // namespace dmuon::sim

#endif
