// The text and JSON forms of a simulation (docs/cluster-format.md,
// "Output"). Text prints milliseconds with 3 decimals; JSON seconds in the
// plan printers' shortest round-trip notation.
#include "sim/Simulate.h"
#include "plan/print/JsonWriter.h"

#include <cstdio>

namespace dmuon::sim {

namespace {

std::string fmt(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string ms(double s) { return fmt("%.3f", s * 1e3); }
std::string gib(double b) { return fmt("%.2f", b / 1073741824.0) + " GiB"; }

const char *laneName(int lane) {
  static const char *const names[] = {"compute", "unshard", "reduce", "replicate"};
  return lane >= 0 && lane < 4 ? names[lane] : "?";
}

std::string row(const SchemeResult &r, bool showRank) {
  std::string name = r.name;
  name.resize(std::max<size_t>(name.size(), 24), ' ');
  std::string rank = showRank ? std::to_string(r.rank) : "-";
  rank.insert(0, rank.size() < 6 ? 6 - rank.size() : 0, ' ');
  auto col = [](const std::string &s) {
    return std::string(s.size() < 12 ? 12 - s.size() : 0, ' ') + s;
  };
  return name + rank + col(ms(r.times.total)) + col(ms(r.times.compute)) +
         col(ms(r.times.exposed)) + col(ms(r.times.optimizer)) + col(ms(r.times.ns)) + "\n";
}

std::string groupName(const Simulation &s, int g) {
  return g >= 0 && static_cast<size_t>(g) < s.split.names.size()
             ? s.split.names[static_cast<size_t>(g)]
             : std::string("-");
}

std::string padLeft(const std::string &s, size_t width) {
  return std::string(s.size() < width ? width - s.size() : 0, ' ') + s;
}

// The ideal bubble of P equal stages over M micro-batches without sends,
// under either schedule: what the simulated one is compared with.
double equalStagesBubble(const PipelineReport &pr) {
  const double p = static_cast<double>(pr.stages), m = static_cast<double>(pr.microBatches);
  return (p - 1) / (m + p - 1);
}

std::string pipelineText(const Simulation &s) {
  const PipelineReport &pr = s.pipeline;
  std::string o = "pipeline: " + std::to_string(pr.stages) + " stages, " +
                  pipelineScheduleName(pr.schedule) + ", " + std::to_string(pr.microBatches) +
                  " micro-batches";
  if (pr.tokensPerMicroBatch > 0)
    o += " of " + fmt("%.6g", pr.tokensPerMicroBatch) + " tokens";
  if (pr.activationBytes > 0)
    o += "; a micro-batch's activations are " + fmt("%.2f", pr.activationBytes / 1048576.0) +
         " MiB (hidden " + std::to_string(pr.hiddenSize) + ")";
  else
    o += "; activations not sent (needs the workload's tokens_per_rank and a hidden size)";
  o += "\n";
  o += "pipeline: bubble " + fmt("%.4f", pr.bubble) + " of the schedule's " + ms(pr.makespan) +
       " ms (equal stages: (P-1)/(M+P-1) = " + fmt("%.4f", equalStagesBubble(pr)) +
       "); every stage done at " + ms(pr.flush) + " ms, then the slowest optimizer step\n";
  o += "stage  ranks    rank  fwd_ms/mb  bwd_ms/mb    send_ms  exposed_ms     end_ms "
       "optimizer_ms  in_flight\n";
  for (size_t k = 0; k < pr.rows.size(); ++k) {
    const StageRow &r = pr.rows[k];
    o += padLeft(std::to_string(k), 5) + padLeft(std::to_string(r.ranks), 7) +
         padLeft(std::to_string(r.rank), 8) + padLeft(ms(r.cost.forward), 11) +
         padLeft(ms(r.cost.backward), 11) + padLeft(ms(r.cost.send), 11) +
         padLeft(ms(r.times.exposed), 12) + padLeft(ms(r.end), 11) +
         padLeft(ms(r.times.optimizer), 13) + padLeft(std::to_string(r.inFlight), 11) + "\n";
  }
  return o;
}

} // namespace

std::string printSimulationText(const Simulation &s) {
  std::string o;
  o += "cluster: " + (s.clusterName.empty() ? std::string("(unnamed)") : s.clusterName) + " (" +
       s.clusterPath + "): " + std::to_string(s.world) + " ranks on " + std::to_string(s.nodes) +
       (s.nodes == 1 ? " node" : " nodes") + " of " + std::to_string(s.devicesPerNode) +
       " devices";
  if (s.computeShare < 1)
    o += "; ranks time-share processors: each computes at " + fmt("%.3g", s.computeShare) +
         " of its device's rates";
  if (s.collectiveWait > 0)
    o += " and waits " + ms(s.collectiveWait) + " ms more on each collective";
  o += "\n";
  double fb = 0;
  for (size_t g = 0; g < s.split.forward.size(); ++g)
    fb += s.split.forward[g] + s.split.backward[g];
  o += "workload: forward+backward " + ms(fb) + " ms per rank";
  if (s.split.flopsPerToken > 0)
    o += " (" + fmt("%.4g", s.split.flopsPerToken) + " flops per token x " +
         fmt("%.0f", s.tokensPerRank) + " tokens per rank at mfu " + fmt("%.3g", s.mfu) + ")";
  o += "\n";
  o += "scheme                    rank     step_ms  compute_ms  exposed_ms optimizer_ms     "
       "ns_ms\n";
  o += row(s.dmuon, true);
  if (s.refreshes.any())
    o += row(s.dmuonWorst, true);
  for (const SchemeResult &b : s.baselines)
    o += row(b, false);
  for (const SchemeResult &b : s.baselines)
    if (b.times.total > 0)
      o += "dmuon / " + b.name + ": " + fmt("%.4f", s.dmuon.times.total / b.times.total) + "\n";
  if (s.refreshes.any()) {
    std::string rules;
    if (s.refreshes.soap > 0)
      rules += "SOAP every " + std::to_string(s.refreshes.soap);
    if (s.refreshes.shampoo > 0)
      rules += std::string(rules.empty() ? "" : ", ") + "Shampoo every " +
               std::to_string(s.refreshes.shampoo);
    o += "refreshes: " + rules + " steps, a period of " + std::to_string(s.refreshes.steps()) +
         "; dmuon is its mean step, dmuon worst step its step " + std::to_string(s.worstStep) +
         "\n";
  }
  if (s.pipeline.stages > 1)
    o += pipelineText(s);
  const MemoryReport &m = s.memory;
  if (m.largest.rank >= 0) {
    o += "memory: largest rank " + std::to_string(m.largest.rank) + " needs " +
         gib(static_cast<double>(m.largest.total)) + " of " + gib(m.deviceBytes) + ": " +
         (m.ranksOver == 0 ? std::string("fits")
                           : "does not fit (" + std::to_string(m.ranksOver) + " of " +
                                 std::to_string(s.world) + " ranks over)") +
         "\n";
    if (m.peak.group >= 0)
      o += "memory: its buffers peak at " + gib(static_cast<double>(m.peak.bytes)) +
           " in hook group '" + groupName(s, m.peak.group) + "' (" + m.peak.phase + ")" +
           (m.traceMatches ? "" : "; the plan's peak figure differs from this trace") + "\n";
  }
  o += "timeline of rank " + std::to_string(s.dmuon.rank) +
       (s.pipeline.stages > 1 ? ", its stage's layers, the micro-batches' compute back to back"
                              : "") +
       " (ms):\n";
  for (const Span &sp : s.timeline)
    o += "  " + ms(sp.begin) + " " + ms(sp.end) + " " + laneName(sp.lane) + " " + sp.what +
         "\n";
  return o;
}

std::string printSimulationJson(const Simulation &s) {
  using planfile::print::Json;
  Json j;
  auto times = [&](const SchemeResult &r, bool showRank) {
    j.beginObject();
    j.field("name", r.name);
    if (showRank)
      j.field("rank", r.rank);
    j.field("step_s", r.times.total);
    j.field("compute_s", r.times.compute);
    j.field("exposed_comm_s", r.times.exposed);
    j.field("optimizer_step_s", r.times.optimizer);
    j.field("ns_s", r.times.ns);
    j.endObject();
  };
  j.beginObject();
  j.key("cluster");
  j.beginObject();
  j.field("name", s.clusterName);
  j.field("path", s.clusterPath);
  j.field("ranks", s.world);
  j.field("nodes", s.nodes);
  j.field("devices_per_node", s.devicesPerNode);
  j.field("compute_share", s.computeShare);
  j.field("collective_wait_s", s.collectiveWait);
  j.endObject();
  double fb = 0;
  for (size_t g = 0; g < s.split.forward.size(); ++g)
    fb += s.split.forward[g] + s.split.backward[g];
  j.key("workload");
  j.beginObject();
  j.field("forward_backward_s", fb);
  if (s.split.flopsPerToken > 0) {
    j.field("flops_per_token", s.split.flopsPerToken);
    j.field("tokens_per_rank", s.tokensPerRank);
    j.field("mfu", s.mfu);
  }
  j.endObject();
  j.key("dmuon");
  times(s.dmuon, true);
  if (s.refreshes.any()) {
    j.key("dmuon_worst_step");
    times(s.dmuonWorst, true);
    j.key("refresh_period");
    j.beginObject();
    j.field("soap_frequency", s.refreshes.soap);
    j.field("shampoo_frequency", s.refreshes.shampoo);
    j.field("steps", s.refreshes.steps());
    j.field("worst_step", s.worstStep);
    j.endObject();
  }
  j.key("baselines");
  j.beginArray();
  for (const SchemeResult &b : s.baselines)
    times(b, false);
  j.endArray();
  const MemoryReport &m = s.memory;
  j.key("memory");
  j.beginObject();
  j.field("device_bytes", m.deviceBytes);
  j.field("largest_rank", m.largest.rank);
  j.field("largest_bytes", m.largest.total);
  j.field("ranks_over", m.ranksOver);
  j.field("fits", m.ranksOver == 0);
  j.field("peak_hook_group", groupName(s, m.peak.group));
  j.field("peak_phase", m.peak.phase);
  j.field("peak_buffer_bytes", m.peak.bytes);
  j.endObject();
  if (s.pipeline.stages > 1) {
    const PipelineReport &pr = s.pipeline;
    j.key("pipeline");
    j.beginObject();
    j.field("stages", pr.stages);
    j.field("schedule", std::string(pipelineScheduleName(pr.schedule)));
    j.field("micro_batches", pr.microBatches);
    j.field("tokens_per_micro_batch", pr.tokensPerMicroBatch);
    j.field("hidden_size", pr.hiddenSize);
    j.field("activation_bytes", pr.activationBytes);
    j.field("schedule_s", pr.makespan);
    j.field("bubble_fraction", pr.bubble);
    j.field("equal_stages_bubble_fraction", equalStagesBubble(pr));
    j.field("flush_s", pr.flush);
    j.key("stage_rows");
    j.beginArray();
    for (size_t k = 0; k < pr.rows.size(); ++k) {
      const StageRow &r = pr.rows[k];
      j.beginObject(true);
      j.field("stage", static_cast<int64_t>(k));
      j.field("ranks", r.ranks);
      j.field("rank", r.rank);
      j.field("forward_per_micro_batch_s", r.cost.forward);
      j.field("backward_per_micro_batch_s", r.cost.backward);
      j.field("send_s", r.cost.send);
      j.field("exposed_comm_s", r.times.exposed);
      j.field("end_s", r.end);
      j.field("optimizer_step_s", r.times.optimizer);
      j.field("in_flight_micro_batches", r.inFlight);
      j.endObject();
    }
    j.endArray();
    j.endObject();
  }
  j.key("timeline");
  j.beginArray();
  for (const Span &sp : s.timeline) {
    j.beginObject(true);
    j.field("lane", laneName(sp.lane));
    j.field("what", sp.what);
    j.field("begin_s", sp.begin);
    j.field("end_s", sp.end);
    j.endObject();
  }
  j.endArray();
  j.endObject();
  return j.out + "\n";
}

} // namespace dmuon::sim
