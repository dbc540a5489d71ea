// The HTML form of a simulation (docs/cluster-format.md, "Output"): a
// section for the plan's HTML report with the schemes' predicted steps and
// the busiest rank's measured step as an inline SVG timeline, one lane per
// stream; no scripts, no external references, as plan/print's pages.
#include "sim/Simulate.h"
#include "plan/print/HtmlFormat.h"

#include <algorithm>

namespace dmuon::sim {

namespace {

using planfile::print::esc;
using planfile::print::fmt;
using planfile::print::niceCeil;
using planfile::print::px;

constexpr double kLabel = 80, kPlot = 1000, kLane = 26, kAxis = 24;
// Spans past this many share their lane's drawing without their own
// tooltip (a plan of thousands of hook groups stays a few hundred KB).
constexpr size_t kMaxTitledSpans = 4000;

const char *const kLaneNames[] = {"compute", "unshard", "reduce", "replicate"};
// Compute in grey; the streams in colours that tell apart in greyscale too.
const char *const kLaneColours[] = {"#8c96a8", "#3b6fb6", "#d9822b", "#2e9c6a"};

std::string ms(double s) { return fmt("%.3f", s * 1e3); }

std::string schemeRow(const SchemeResult &r, bool showRank) {
  return "<tr><td class=\"l\">" + esc(r.name) + "</td><td>" +
         (showRank ? std::to_string(r.rank) : std::string("-")) + "</td><td>" +
         ms(r.times.total) + "</td><td>" + ms(r.times.compute) + "</td><td>" +
         ms(r.times.exposed) + "</td><td>" + ms(r.times.optimizer) + "</td><td>" +
         ms(r.times.ns) + "</td></tr>\n";
}

std::string timelineSvg(const Simulation &s) {
  double end = 0;
  for (const Span &sp : s.timeline)
    end = std::max(end, sp.end);
  const double top = niceCeil(std::max(end, 1e-9));
  const double height = kAxis + 4 * kLane + 6;
  auto x = [&](double t) { return kLabel + kPlot * t / top; };
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  px(kLabel + kPlot + 20) + "\" height=\"" + px(height) +
                  "\" role=\"img\" aria-label=\"timeline of rank " +
                  std::to_string(s.dmuon.rank) + "\">\n";
  for (int tick = 0; tick <= 10; ++tick) { // axis, ms
    const double t = top * tick / 10;
    o += "<line x1=\"" + px(x(t)) + "\" y1=\"" + px(kAxis - 4) + "\" x2=\"" + px(x(t)) +
         "\" y2=\"" + px(height) + "\" stroke=\"#e3e7ee\"/><text x=\"" + px(x(t)) +
         "\" y=\"" + px(kAxis - 8) + "\" font-size=\"10\" text-anchor=\"middle\">" +
         fmt("%.4g", t * 1e3) + "</text>\n";
  }
  o += "<text x=\"0\" y=\"" + px(kAxis - 8) + "\" font-size=\"10\">ms</text>\n";
  for (int lane = 0; lane < 4; ++lane)
    o += "<text x=\"0\" y=\"" + px(kAxis + lane * kLane + 16) + "\" font-size=\"11\">" +
         kLaneNames[lane] + "</text>\n";
  size_t titled = 0;
  for (const Span &sp : s.timeline) {
    if (sp.lane < 0 || sp.lane > 3)
      continue;
    const double w = std::max(0.5, x(sp.end) - x(sp.begin));
    o += "<rect x=\"" + px(x(sp.begin)) + "\" y=\"" + px(kAxis + sp.lane * kLane + 3) +
         "\" width=\"" + px(w) + "\" height=\"" + px(kLane - 6) + "\" fill=\"" +
         kLaneColours[sp.lane] + "\" stroke=\"#fff\" stroke-width=\"0.5\"";
    if (titled++ < kMaxTitledSpans)
      o += "><title>" + esc(sp.what) + ": " + ms(sp.begin) + "\xE2\x80\x93" + ms(sp.end) +
           " ms</title></rect>\n";
    else
      o += "/>\n";
  }
  return o + "</svg>\n";
}

} // namespace

std::string printSimulationHtml(const Simulation &s) {
  std::string o = "<section id=\"simulation\">\n<h2>Simulated step on " +
                  esc(s.clusterName.empty() ? s.clusterPath : s.clusterName) + "</h2>\n";
  o += "<p class=\"note\">" + std::to_string(s.world) + " ranks on " + std::to_string(s.nodes) +
       (s.nodes == 1 ? " node" : " nodes") + " of " + std::to_string(s.devicesPerNode) +
       " devices (" + esc(s.clusterPath) +
       "); milliseconds per step (docs/cluster-format.md).</p>\n";
  o += "<table>\n<tr><th class=\"l\">scheme</th><th>rank</th><th>step</th><th>compute</th>"
       "<th>exposed comm</th><th>optimizer step</th><th>NS</th></tr>\n";
  o += schemeRow(s.dmuon, true);
  if (s.refreshes.any()) // the mean step above; SOAP's and Shampoo's costliest below
    o += schemeRow(s.dmuonWorst, true);
  for (const SchemeResult &b : s.baselines)
    o += schemeRow(b, false);
  o += "</table>\n";
  if (s.pipeline.stages > 1) {
    const PipelineReport &pr = s.pipeline;
    o += "<h2>Pipeline</h2>\n<p class=\"note\">" + std::to_string(pr.stages) + " stages, " +
         pipelineScheduleName(pr.schedule) + ", " + std::to_string(pr.microBatches) +
         " micro-batches; bubble " + fmt("%.4f", pr.bubble) + " of the schedule's " +
         ms(pr.makespan) + " ms; every stage done at " + ms(pr.flush) +
         " ms, then the slowest optimizer step.</p>\n";
    o += "<table>\n<tr><th>stage</th><th>ranks</th><th>rank</th><th>forward / micro-batch</th>"
         "<th>backward / micro-batch</th><th>send</th><th>exposed comm</th><th>end</th>"
         "<th>optimizer step</th><th>in flight</th></tr>\n";
    for (size_t k = 0; k < pr.rows.size(); ++k) {
      const StageRow &r = pr.rows[k];
      o += "<tr><td>" + std::to_string(k) + "</td><td>" + std::to_string(r.ranks) + "</td><td>" +
           std::to_string(r.rank) + "</td><td>" + ms(r.cost.forward) + "</td><td>" +
           ms(r.cost.backward) + "</td><td>" + ms(r.cost.send) + "</td><td>" + ms(r.times.exposed) +
           "</td><td>" + ms(r.end) + "</td><td>" + ms(r.times.optimizer) + "</td><td>" +
           std::to_string(r.inFlight) + "</td></tr>\n";
    }
    o += "</table>\n";
  }
  o += "<h2>Timeline of the busiest rank (" + std::to_string(s.dmuon.rank) + ")</h2>\n";
  o += "<p class=\"note\">The measured (second) step from its start: the host's compute and "
       "the collectives on the runtime's three streams; hover a span for its name.</p>\n";
  if (s.timeline.empty())
    o += "<p class=\"note\">Nothing takes time on this cluster.</p>\n";
  else
    o += timelineSvg(s);
  return o + "</section>\n";
}

std::string insertSimulationHtml(std::string page, const Simulation &s) {
  const std::string section = printSimulationHtml(s);
  const size_t at = page.rfind("</body>");
  if (at == std::string::npos)
    return page + section;
  page.insert(at, section);
  return page;
}

} // namespace dmuon::sim
