#include "plan/print/HtmlRanks.h"
#include "plan/print/HtmlFormat.h"
#include "plan/print/HtmlMemory.h"

#include <algorithm>
#include <functional>
#include <vector>

namespace dmuon::planfile::print {

namespace {

using Listed = common::RankRows::Listed;

constexpr uint32_t kMaxRankRows = 64; // first ranks shown, plus the extremes

// The bytes a rank's collectives move in a step, sent and received (an
// all-reduce counts twice).
double movedBytes(const plan::RankFigures *r) {
  return double(r->broadcast_send_bytes()) + double(r->broadcast_recv_bytes()) +
         double(r->reduce_send_bytes()) + double(r->reduce_recv_bytes()) +
         double(r->replicate_send_bytes()) + double(r->replicate_recv_bytes()) +
         2 * double(r->allreduce_bytes()) + double(r->gather_send_bytes()) +
         double(r->gather_recv_bytes()) + double(r->scatter_send_bytes()) +
         double(r->scatter_recv_bytes());
}

// Whether some rank gathers or scatters over a model-parallel dim: only then
// does the table have those columns.
bool anyModelParallel(const std::vector<Listed> &listed) {
  for (const Listed &e : listed) {
    const plan::RankFigures *r = e.row;
    if (r->gather_send_bytes() || r->gather_recv_bytes() || r->scatter_send_bytes() ||
        r->scatter_recv_bytes())
      return true;
  }
  return false;
}

// Which entries the table shows: all if few; else the first kMaxRankRows
// (`head`) and the extremes (busiest NS load, most master bytes, most bytes
// moved), in order.
struct ShownRows {
  uint32_t busiest = 0, heaviest = 0, chattiest = 0;
  uint32_t head = 0;
  std::vector<uint32_t> rows;

  bool highlighted(uint32_t i) const { return i == busiest || i == heaviest || i == chattiest; }
};

ShownRows chooseRows(const std::vector<Listed> &listed) {
  const uint32_t n = static_cast<uint32_t>(listed.size());
  ShownRows s;
  for (uint32_t i = 1; i < n; ++i) {
    const plan::RankFigures *r = listed[i].row;
    if (r->ns_flops() > listed[s.busiest].row->ns_flops())
      s.busiest = i;
    if (r->master_bytes() > listed[s.heaviest].row->master_bytes())
      s.heaviest = i;
    if (movedBytes(r) > movedBytes(listed[s.chattiest].row))
      s.chattiest = i;
  }
  s.head = n <= kMaxRankRows + 8 ? n : kMaxRankRows;
  for (uint32_t i = 0; i < s.head; ++i)
    s.rows.push_back(i);
  for (uint32_t x : {s.busiest, s.heaviest, s.chattiest})
    if (x >= s.head && std::find(s.rows.begin(), s.rows.end(), x) == s.rows.end())
      s.rows.push_back(x);
  std::sort(s.rows.begin() + s.head, s.rows.end());
  return s;
}

std::string tableHeader(const MeshView &mesh, bool mp) {
  const char *cols[] = {"owned params", "owned elements", "master",     "momentum",
                        "peak buffer",  "NS flops",       "bcast send", "bcast recv",
                        "reduce send",  "reduce recv",    "repl send",  "repl recv",
                        "allreduce",    "moved"};
  std::string coordHead;
  for (size_t i = 0; i < mesh.dimNames.size(); ++i)
    coordHead.append(i ? "," : "").append(mesh.dimNames[i]);
  std::string o = "<table class=\"ranks\">\n<tr><th>rank</th><th class=\"l\">coord<br>(" +
                  esc(coordHead) + ")</th>";
  for (const char *c : cols) {
    if (mp && std::string(c) == "moved")
      o += "<th>gather send</th><th>gather recv</th><th>scatter send</th>"
           "<th>scatter recv</th>";
    o += std::string("<th>") + c + "</th>";
  }
  return o + "</tr>\n";
}

std::string bytesCell(int64_t b) {
  return "<td title=\"" + grouped(b) + " bytes\">" + bytes(double(b)) + "</td>";
}

// One entry's row: a rank, or a run of ranks with equal figures.
std::string rankRow(const MeshView &mesh, const Listed &e, const char *cls, bool mp) {
  const plan::RankFigures *r = e.row;
  return std::string("<tr") + (cls ? std::string(" class=\"") + cls + "\"" : "") + "><td>" +
         (e.end - e.first == 1 ? i64(e.first) : i64(e.first) + "\xE2\x80\x93" + i64(e.end - 1)) +
         "</td><td class=\"l\">" + mesh.coords(e.first) + "</td><td>" + i64(r->owned_params()) +
         "</td><td>" + grouped(r->owned_elements()) + "</td>" + bytesCell(r->master_bytes()) +
         bytesCell(r->momentum_bytes()) + bytesCell(r->peak_buffer_bytes()) + "<td>" +
         CostUnit{}(r->ns_flops()) + "</td>" + bytesCell(r->broadcast_send_bytes()) +
         bytesCell(r->broadcast_recv_bytes()) + bytesCell(r->reduce_send_bytes()) +
         bytesCell(r->reduce_recv_bytes()) + bytesCell(r->replicate_send_bytes()) +
         bytesCell(r->replicate_recv_bytes()) + bytesCell(r->allreduce_bytes()) +
         (mp ? bytesCell(r->gather_send_bytes()) + bytesCell(r->gather_recv_bytes()) +
                   bytesCell(r->scatter_send_bytes()) + bytesCell(r->scatter_recv_bytes())
             : std::string()) +
         "<td>" + bytes(movedBytes(r)) + "</td></tr>\n";
}

std::string gapRow(const std::string &span, int64_t hidden) {
  return "<tr class=\"gap\"><td colspan=\"" + span + "\">\xE2\x8B\xAF " + i64(hidden) +
         " ranks not shown \xE2\x8B\xAF</td></tr>\n";
}

// The min (or max) of one figure over every entry, as a double.
template <typename Get> double extreme(const std::vector<Listed> &listed, bool isMax, Get get) {
  double v = double(std::invoke(get, listed[0].row));
  for (size_t i = 1; i < listed.size(); ++i)
    v = isMax ? std::max(v, double(std::invoke(get, listed[i].row)))
              : std::min(v, double(std::invoke(get, listed[i].row)));
  return v;
}

// The min or max row over all ranks.
std::string extremesRow(const std::vector<Listed> &listed, bool isMax, int64_t world, bool mp) {
  using F = plan::RankFigures;
  auto b = [&](auto get) { return "<td>" + bytes(extreme(listed, isMax, get)) + "</td>"; };
  // In int64 itself: near 2^63 a double rounds past the int64 range.
  int64_t elements = listed[0].row->owned_elements();
  for (size_t i = 1; i < listed.size(); ++i) {
    const int64_t x = listed[i].row->owned_elements();
    elements = isMax ? std::max(elements, x) : std::min(elements, x);
  }
  return std::string("<tr class=\"agg\"><td>") + (isMax ? "max" : "min") +
         "</td><td class=\"l\">all " + i64(world) + " ranks</td><td>" +
         fmt("%.0f", extreme(listed, isMax, &F::owned_params)) + "</td><td>" + grouped(elements) +
         "</td>" + b(&F::master_bytes) + b(&F::momentum_bytes) + b(&F::peak_buffer_bytes) + "<td>" +
         CostUnit{}(extreme(listed, isMax, &F::ns_flops)) + "</td>" + b(&F::broadcast_send_bytes) +
         b(&F::broadcast_recv_bytes) + b(&F::reduce_send_bytes) + b(&F::reduce_recv_bytes) +
         b(&F::replicate_send_bytes) + b(&F::replicate_recv_bytes) + b(&F::allreduce_bytes) +
         (mp ? b(&F::gather_send_bytes) + b(&F::gather_recv_bytes) + b(&F::scatter_send_bytes) +
                   b(&F::scatter_recv_bytes)
             : std::string()) +
         b(movedBytes) + "</tr>\n";
}

// The table: the shown rows, a gap row where ranks are left out, and the
// min and max rows.
std::string rankTable(const MeshView &mesh, const std::vector<Listed> &listed,
                      const ShownRows &shown) {
  const uint32_t n = static_cast<uint32_t>(listed.size());
  const int64_t world = listed.back().end;
  const bool mp = anyModelParallel(listed);
  const std::string span = mp ? "20" : "16";
  std::string o = tableHeader(mesh, mp);
  uint32_t prev = 0;
  bool first = true;
  for (uint32_t i : shown.rows) {
    if (!first && i != prev + 1)
      o += gapRow(span, listed[i].first - listed[prev].end);
    o += rankRow(mesh, listed[i], n > 1 && shown.highlighted(i) ? "hot" : nullptr, mp);
    prev = i;
    first = false;
  }
  if (prev + 1 < n)
    o += gapRow(span, world - listed[prev].end);
  if (n > 1)
    o += extremesRow(listed, false, world, mp) + extremesRow(listed, true, world, mp);
  return o + "</table>\n";
}

// What the table leaves out, or what its highlights mean.
std::string tableNote(const std::vector<Listed> &listed, const ShownRows &shown) {
  const uint32_t n = static_cast<uint32_t>(listed.size());
  const int64_t world = listed.back().end;
  if (shown.rows.size() < n)
    return "<p class=\"note\">Showing " + i64(shown.rows.size()) + " of " + i64(n) +
           (int64_t(n) == world ? std::string(" ranks") : " runs of ranks with equal figures") +
           ": the first " + i64(shown.head) +
           " and the busiest (NS load), the one with the most master bytes and the one "
           "moving the most bytes (highlighted). The min / max rows cover all ranks.</p>\n";
  if (n > 1)
    return "<p class=\"note\">Highlighted: the busiest rank (NS load), the one with the most "
           "master bytes and the one moving the most bytes.</p>\n";
  return "";
}

// The table's rows, plus the rank holding the most memory.
std::vector<uint32_t> memoryChartRows(const std::vector<Listed> &listed, const ShownRows &shown) {
  std::vector<uint32_t> rows = shown.rows;
  uint32_t fullest = 0;
  for (uint32_t i = 1; i < listed.size(); ++i)
    if (listed[i].row->memory_bytes() > listed[fullest].row->memory_bytes())
      fullest = i;
  if (std::find(rows.begin(), rows.end(), fullest) == rows.end()) {
    rows.push_back(fullest);
    std::sort(rows.begin() + shown.head, rows.end());
  }
  return rows;
}

} // namespace

std::string htmlRanks(const plan::Plan &plan, const MeshView &mesh) {
  // One entry per rank up to common::kRankListLimit ranks, else per run
  // of ranks with equal figures.
  const std::vector<Listed> listed = common::RankRows(plan).listed();
  std::string o = "<section id=\"ranks\">\n<h2>Per-rank memory and communication (per training "
                  "step)</h2>\n";
  o += "<p class=\"note\">Bytes are logical collective payloads as the runtime counts them "
       "(docs/plan-format.md \xC2\xA7 Communication accounting). Master and momentum are "
       "fp32 copies; peak buffer is the largest unsharded hook-group buffer resident at "
       "once.</p>\n";
  // The verifier lets a plan omit the per-rank figures (an empty list).
  if (listed.empty())
    return o + "<p class=\"note\">This plan records no per-rank figures.</p>\n";
  const ShownRows shown = chooseRows(listed);
  o += rankTable(mesh, listed, shown) + tableNote(listed, shown) + "</section>\n";
  return o + htmlMemoryChart(listed, memoryChartRows(listed, shown));
}

} // namespace dmuon::planfile::print
