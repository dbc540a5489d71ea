#include "sim/Memory.h"
#include "plan/print/HtmlMemory.h"
#include "plan/print/PrintCommon.h"
#include "sim/Programs.h"
#include "common/RankRows.h"

#include <algorithm>

namespace dmuon::sim {

namespace {

// Replicate staging of each group for shard column s: the fp32 masters of
// the segments it owns whose column has more than one rank.
std::vector<int64_t> stagingOf(const plan::Plan &p, int64_t s, int64_t stage,
                               const MeshView &mesh) {
  const size_t n = p.hook_groups() ? p.hook_groups()->size() : 0;
  std::vector<int64_t> staging(n, 0);
  for (size_t g = 0; g < n; ++g) {
    const plan::HookGroup *hg = p.hook_groups()->Get(static_cast<unsigned>(g));
    if (!hg->segments() || hg->pipeline_stage() != stage)
      continue;
    for (const plan::Segment *seg : *hg->segments()) {
      if (seg->owner_shard() != s || mesh.groupSize(segmentColumnDims(p, *seg, mesh)) <= 1 ||
          !seg->params())
        continue;
      for (int i : *seg->params()) {
        const plan::Param *q = p.params()->Get(static_cast<unsigned>(i));
        const auto *shape = q->local_shape() && q->local_shape()->size() ? q->local_shape()
                                                                         : q->shape();
        int64_t el = 1;
        if (shape)
          for (int64_t d : *shape)
            el *= d;
        staging[g] += el * 4;
      }
    }
  }
  return staging;
}

} // namespace

BufferPeak tracePeakBuffers(const plan::Plan &p, int64_t s, int64_t stage) {
  const MeshView mesh = MeshView::of(p, 1);
  BufferPeak peak;
  if (!p.hook_groups())
    return peak;
  const auto &hg = *p.hook_groups();
  const size_t n = hg.size();
  const bool z3 = !p.options() || p.options()->mode() == plan::Mode::z3;
  const bool async = !p.options() || p.options()->replicate_async();
  const std::vector<int64_t> groupStaging = stagingOf(p, s, stage, mesh);
  std::vector<int64_t> staging = async ? groupStaging : std::vector<int64_t>(n, 0);
  std::vector<bool> unsharded(n, false);
  int64_t live = 0;
  for (int64_t b : staging)
    live += b;
  auto note = [&](size_t g, const char *phase) {
    if (live > peak.bytes) {
      peak.bytes = live;
      peak.group = static_cast<int>(g);
      peak.phase = phase;
    }
  };
  // Another stage's groups hold nothing on this rank; its own are one
  // contiguous run, so the walk over every group is the walk of its own (as
  // the compiler's RankFigures pass walks them).
  auto own = [&](size_t g) { return hg.Get(static_cast<unsigned>(g))->pipeline_stage() == stage; };
  auto buffer = [&](size_t g) {
    return own(g) ? hg.Get(static_cast<unsigned>(g))->buffer_bytes() : int64_t(0);
  };
  auto reduceBuffer = [&](size_t g) {
    return own(g) ? hg.Get(static_cast<unsigned>(g))->reduce_buffer_bytes() : int64_t(0);
  };
  // A group's staging is consumed before its buffer is allocated.
  auto unshard = [&](size_t g, size_t at, const char *phase) {
    if (unsharded[g])
      return;
    live += buffer(g) - staging[g];
    staging[g] = 0;
    unsharded[g] = true;
    note(at, phase);
  };
  for (size_t g = 0; g < n; ++g) {
    unshard(g, g, "forward");
    if (g + 1 < n)
      unshard(g + 1, g, "forward");
    if (z3) {
      live -= buffer(g);
      unsharded[g] = false;
    }
  }
  std::vector<bool> gradLive(n, false);
  for (size_t g = n; g-- > 0;) {
    unshard(g, g, "backward");
    live += reduceBuffer(g);
    gradLive[g] = true;
    note(g, "backward");
    live -= buffer(g);
    unsharded[g] = false;
    if (g + 2 < n) {
      live -= reduceBuffer(g + 2);
      gradLive[g + 2] = false;
    }
  }
  for (size_t g = 0; g < n; ++g)
    if (gradLive[g])
      live -= reduceBuffer(g);
  for (size_t g = 0; g < n; ++g) {
    live += groupStaging[g];
    note(g, "replicate");
    if (!async)
      live -= groupStaging[g];
  }
  return peak;
}

MemoryReport checkMemory(const plan::Plan &p, double deviceBytes) {
  MemoryReport out;
  out.deviceBytes = deviceBytes;
  // Per row: a rank, or a run of ranks with equal figures (plan 1.6).
  const common::RankRows rows(p);
  for (uint32_t i = 0; i < rows.size(); ++i) {
    const plan::RankFigures *f = rows.row(i);
    const bool fits = static_cast<double>(f->memory_bytes()) <= deviceBytes;
    if (!fits)
      out.ranksOver += rows.count(i);
    if (out.largest.rank < 0 || f->memory_bytes() > out.largest.total)
      out.largest = {rows.first(i), f->memory_bytes(), fits};
  }
  if (out.largest.rank < 0)
    return out;
  const MeshView mesh = MeshView::of(p, 1);
  const std::vector<int64_t> c = mesh.coord(out.largest.rank);
  const int64_t s = mesh.shardDim >= 0 ? c[static_cast<size_t>(mesh.shardDim)] : 0;
  out.peak = tracePeakBuffers(p, s, mesh.stageOfRank(out.largest.rank));
  const plan::RankFigures *f = rows.ofRank(out.largest.rank);
  out.traceMatches = out.peak.bytes == f->peak_buffer_bytes();
  return out;
}

std::string memoryTableText(const plan::Plan &p, double deviceBytes, size_t maxRows) {
  using planfile::print::kMemoryCategories;
  std::string o;
  // Per listed row: a rank, or a run of ranks with equal figures (plan 1.6).
  const common::RankRows rows(p);
  if (rows.empty())
    return o;
  const std::vector<common::RankRows::Listed> listed = rows.listed();
  size_t largest = 0;
  for (size_t i = 1; i < listed.size(); ++i)
    if (listed[i].row->memory_bytes() > listed[largest].row->memory_bytes())
      largest = i;
  auto line = [&](const common::RankRows::Listed &l) {
    const plan::RankFigures &f = *l.row;
    o += "  " + l.label() + ":";
    for (const auto &c : kMemoryCategories)
      o += std::string(" ") + c.name + " " + planfile::print::humanBytes(double(c.bytes(f)), 4) + ",";
    const double total = static_cast<double>(f.memory_bytes());
    o += " total " + planfile::print::humanBytes(total, 4) + ": " +
         (total <= deviceBytes ? std::string("fits")
                               : "over by " + planfile::print::humanBytes(total - deviceBytes, 4)) +
         "\n";
  };
  for (size_t i = 0; i < listed.size() && i < maxRows; ++i)
    line(listed[i]);
  if (listed.size() > maxRows) {
    o += "  ... " + std::to_string(listed.size() - maxRows) + " more rows; the largest:\n";
    if (largest >= maxRows)
      line(listed[largest]);
  }
  return o;
}

std::string memoryWarningText(const plan::Plan &p, const MemoryReport &m) {
  if (m.ranksOver == 0)
    return {};
  const int64_t world = p.mesh() ? p.mesh()->world_size() : 0;
  std::string where;
  if (m.peak.group >= 0 && p.hook_groups() &&
      static_cast<size_t>(m.peak.group) < p.hook_groups()->size())
    where = "; its hook-group buffers peak in '" +
            p.hook_groups()->Get(static_cast<unsigned>(m.peak.group))->name()->str() + "' (" +
            m.peak.phase + ")";
  return std::to_string(m.ranksOver) + " of " + std::to_string(world) +
         " ranks need more than the device's " +
         std::to_string(static_cast<int64_t>(m.deviceBytes)) + " bytes; rank " +
         std::to_string(m.largest.rank) + " needs " + std::to_string(m.largest.total) + where +
         "; expert or tensor parallelism (a mesh dim that shards the largest params) or finer "
         "hook groups (--hook-boundary) would lower it";
}

} // namespace dmuon::sim
