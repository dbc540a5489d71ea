// The summary of a plan (dmuon-plan --emit=summary): model, mesh, params,
// partition quality and the busiest ranks in a few lines.
#include "plan/print/PlanPrinter.h"
#include "plan/print/PrintCommon.h"

#include <charconv>
#include <initializer_list>

namespace dmuon::planfile {

using namespace print;

namespace {

std::string human(double bytes) { return humanBytes(bytes, 5); } // up to PiB

std::string percent(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, 100 * x, std::chars_format::fixed, 2);
  return (r.ec == std::errc() ? std::string(buf, r.ptr) : std::string("?")) + "%";
}

} // namespace

std::string printSummary(const plan::Plan &plan) {
  View v(plan);
  std::string o;
  o += "model: " + orDash(str(plan.model_name())) + " (" + str(plan.source()) + ")\n";
  o += "plan: format " + v.version() + ", stage " + v.stageName() + ", fingerprint " +
       hex64(plan.fingerprint()) + ", " + str(plan.producer()) + "\n";
  o += "mesh: " + v.meshString() + " (" + num(v.worldSize()) + " ranks, " + num(v.G) +
       " shards x " + num(v.R) + " replicas = " + num(v.slots()) + " owner slots" +
       (v.D > 1 ? " x " + num(v.D) + " data indices = " + num(v.fineSlots()) + " owners"
                : std::string()) +
       ")\n";
  const plan::Stats *s = plan.stats();
  if (v.reached(plan::Stage::select)) {
    // Unsigned sums: a plan that was not verified may hold any values.
    uint64_t muon = 0, adamw = 0, muonElems = 0, adamwElems = 0;
    for (uint32_t i = 0; i < size(plan.params()); ++i) {
      const plan::Param *q = plan.params()->Get(i);
      uint64_t n = 1;
      for (uint32_t k = 0; k < size(q->shape()); ++k)
        n *= static_cast<uint64_t>(q->shape()->Get(k));
      (isMuon(*q) ? muon : adamw) += 1;
      (isMuon(*q) ? muonElems : adamwElems) += n;
    }
    auto u = [](uint64_t x) { return std::to_string(x); };
    o += "params: " + u(muon + adamw) + " (" + u(muon) + " muon, " + u(muonElems) +
         " elements; " + u(adamw) + " adamw, " + u(adamwElems) + " elements)\n";
  } else {
    o += "params: " + num(int64_t(size(plan.params()))) + "\n";
  }
  if (v.reached(plan::Stage::select)) {
    int64_t routes[4] = {0, 0, 0, 0};
    for (uint32_t i = 0; i < size(plan.params()); ++i) {
      const auto r = static_cast<size_t>(routeOf(*plan.params()->Get(i)));
      if (r < 4)
        ++routes[r];
    }
    o += "routes: owner=" + num(routes[size_t(plan::Route::owner)]) +
         " sharded=" + num(routes[size_t(plan::Route::sharded)]) +
         " replicated=" + num(routes[size_t(plan::Route::replicated)]) +
         " host=" + num(routes[size_t(plan::Route::host)]) + "\n";
  }
  if (v.reached(plan::Stage::hooks))
    o += "hook groups: " + num(int64_t(size(plan.hook_groups()))) + "\n";
  if (v.reached(plan::Stage::partition) && s) {
    o += "units: " + num(int64_t(size(plan.units()))) + " over " + num(int64_t(s->slots())) +
         " slots\n";
    o += "partition: lower_bound=" + num(s->lower_bound()) +
         " max_load=" + num(s->max_load()) + " imbalance=" + fixed4(s->imbalance());
    if (s->optimal() || s->max_load() == s->lower_bound())
      o += " (optimal)";
    if (s->lower_bound_kind())
      o += " bound=" + str(s->lower_bound_kind());
    o += "\n";
    if (const auto *stages = s->pipeline_stages(); stages && stages->size() > 0) { // 1.9
      o += "pipeline: " + num(int64_t(stages->size())) + " stages, imbalance per stage";
      for (uint32_t k = 0; k < stages->size(); ++k)
        o += " " + fixed4(stages->Get(k)->imbalance());
      o += "\n";
    }
  }
  const common::RankRows rows(v.p);
  if (v.reached(plan::Stage::layout) && s && !rows.empty()) {
    double total = 0, minNs = 0, maxNs = 0;
    int64_t maxMaster = -1, maxMasterRank = 0, maxMoved = -1, maxMovedRank = 0;
    int64_t sentAt = 0, recvAt = 0;
    const plan::RankFigures *most = nullptr, *least = nullptr;
    int64_t mostRank = 0, leastRank = 0;
    // Per row (a rank, or a run of ranks with equal figures): the first
    // rank of a run is the lowest rank with its figures.
    for (uint32_t i = 0; i < rows.size(); ++i) {
      const plan::RankFigures *r = rows.row(i);
      const int64_t rank = rows.first(i);
      total += r->ns_flops() * static_cast<double>(rows.count(i));
      if (i == 0 || r->ns_flops() < minNs)
        minNs = r->ns_flops();
      if (i == 0 || r->ns_flops() > maxNs)
        maxNs = r->ns_flops();
      if (!most || r->memory_bytes() > most->memory_bytes()) {
        most = r;
        mostRank = rank;
      }
      if (!least || r->memory_bytes() < least->memory_bytes()) {
        least = r;
        leastRank = rank;
      }
      if (r->master_bytes() > maxMaster) {
        maxMaster = r->master_bytes();
        maxMasterRank = rank;
      }
      auto add = [](std::initializer_list<int64_t> xs) {
        uint64_t t = 0; // wraps instead of overflowing on unverified values
        for (int64_t x : xs)
          t += static_cast<uint64_t>(x);
        return static_cast<int64_t>(t);
      };
      int64_t sent = add({r->broadcast_send_bytes(), r->reduce_send_bytes(),
                          r->replicate_send_bytes(), r->allreduce_bytes(),
                          r->gather_send_bytes(), r->scatter_send_bytes(),
                          r->allgather_send_bytes(), r->reduce_scatter_send_bytes()});
      int64_t recv = add({r->broadcast_recv_bytes(), r->reduce_recv_bytes(),
                          r->replicate_recv_bytes(), r->allreduce_bytes(),
                          r->gather_recv_bytes(), r->scatter_recv_bytes(),
                          r->allgather_recv_bytes(), r->reduce_scatter_recv_bytes()});
      if (add({sent, recv}) > maxMoved) {
        maxMoved = add({sent, recv});
        maxMovedRank = rank;
        sentAt = sent;
        recvAt = recv;
      }
    }
    if (total > 0)
      o += "ns share per rank: min=" + percent(minNs / total) +
           " max=" + percent(maxNs / total) + "\n";
    o += "largest master bytes: " + num(maxMaster) + " (" + human(double(maxMaster)) +
         ") on rank " + num(maxMasterRank) + "\n";
    for (const plan::RankFigures *r : {most, least}) {
      if (!r || (r == least && least->memory_bytes() == most->memory_bytes()))
        continue;
      o += std::string(r == most ? "memory, largest" : "memory, smallest") + " (rank " +
           num(r == most ? mostRank : leastRank) + "): " + human(double(r->memory_bytes())) +
           " = masters " + human(double(r->master_bytes())) + " + momentum " +
           human(double(r->momentum_bytes())) + " + values " +
           human(double(r->value_bytes())) + " + adam moments " +
           human(double(r->adam_moment_bytes())) + " + grads " +
           human(double(r->grad_bytes())) + " + buffers " +
           human(double(r->peak_buffer_bytes())) + "\n";
    }
    o += "bytes moved per step (busiest rank " + num(maxMovedRank) + "): " + num(maxMoved) +
         " (" + human(double(maxMoved)) + "; sent " + num(sentAt) + ", received " +
         num(recvAt) + ")\n";
  }
  return o;
}

} // namespace dmuon::planfile
