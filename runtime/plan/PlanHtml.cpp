// The HTML report of a plan (dmuonc --emit=html, dmuon-plan --emit=html).
//
// One self-contained page: inline CSS and inline SVG, no scripts and no
// external references (the only URL is the SVG namespace), so it renders the
// same offline, in a browser or in headless Chromium (scripts/render-report.sh).
// Like the other printers it is a pure function of the buffer, never indexes
// past a vector, and leaves out what the plan's stage has not computed.
//
// Sections: a summary; the mesh as a grid of owner slots (replicate rows x
// shard columns) coloured by NS load; the slot loads as bars against the
// lower bound; the hook groups with their owners; the per-rank memory and
// communication figures. Big meshes stay readable: grid cells shrink to a few
// pixels, bars merge into one path, and the tables are truncated with a note.
#include "plan/PlanPrinter.h"

#include "common/Hex.h"
#include "common/MeshIndex.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace dmuon::planfile {

namespace fb = dmuon::plan;

namespace {

// ---------------------------------------------------------------- limits

constexpr uint32_t kMaxRankRows = 64;      // first ranks shown, plus the extremes
constexpr uint32_t kMaxHookRows = 96;      // hook groups shown
constexpr uint32_t kMaxSegmentsShown = 12; // owners listed per hook group
constexpr uint32_t kMaxBarTitles = 512;    // bars with their own tooltip
constexpr double kWidth = 1240;            // drawing width of the SVGs

// ---------------------------------------------------------------- helpers

template <typename T> uint32_t size(const flatbuffers::Vector<T> *v) { return v ? v->size() : 0; }
std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

std::string esc(const std::string &s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
    case '&':
      o += "&amp;";
      break;
    case '<':
      o += "&lt;";
      break;
    case '>':
      o += "&gt;";
      break;
    case '"':
      o += "&quot;";
      break;
    case '\'':
      o += "&#39;";
      break;
    default:
      // Control characters other than tab/newline cannot appear in HTML text.
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n')
        o += "&#xFFFD;";
      else
        o += c;
    }
  }
  return o;
}

std::string fmt(const char *f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string px(double v) { return fmt("%.2f", v); }
std::string i64(int64_t v) { return std::to_string(v); }

// 1234567 -> "1,234,567"
std::string grouped(int64_t v) {
  std::string d = std::to_string(v < 0 ? -v : v), o;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i && (d.size() - i) % 3 == 0)
      o += ',';
    o += d[i];
  }
  return v < 0 ? "-" + o : o;
}

std::string bytes(double b) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt("%.0f B", b) : fmt("%.2f ", b) + units[u];
}

// A cost in the plan's unit: NS flops (SI prefixes) or measured seconds.
struct CostUnit {
  bool seconds = false;
  std::string operator()(double v) const {
    if (seconds) {
      double a = std::fabs(v);
      if (a == 0)
        return "0 s";
      if (a >= 1)
        return fmt("%.3f s", v);
      if (a >= 1e-3)
        return fmt("%.3f ms", v * 1e3);
      return fmt("%.3f \xC2\xB5s", v * 1e6);
    }
    static const char *pre[] = {"", "k", "M", "G", "T", "P", "E", "Z"};
    int u = 0;
    while (std::fabs(v) >= 1000 && u < 7) {
      v /= 1000;
      ++u;
    }
    return (u == 0 ? fmt("%.0f", v) : fmt("%.2f", v)) + " " + pre[u] + "FLOP";
  }
  const char *name() const { return seconds ? "measured seconds" : "NS flops"; }
};

// Viridis, 9 stops: 0 -> dark purple, 1 -> yellow.
std::string viridis(double t) {
  static const std::array<std::array<double, 3>, 9> stops = {{{68, 1, 84},
                                                              {71, 44, 122},
                                                              {59, 81, 139},
                                                              {44, 113, 142},
                                                              {33, 144, 141},
                                                              {39, 173, 129},
                                                              {92, 200, 99},
                                                              {170, 220, 50},
                                                              {253, 231, 37}}};
  if (!(t > 0))
    t = 0;
  if (t > 1)
    t = 1;
  double x = t * (stops.size() - 1);
  size_t i = std::min(static_cast<size_t>(x), stops.size() - 2);
  double f = x - static_cast<double>(i);
  char b[16];
  int c[3];
  for (int k = 0; k < 3; ++k)
    c[k] = static_cast<int>(std::lround(stops[i][k] + f * (stops[i + 1][k] - stops[i][k])));
  std::snprintf(b, sizeof b, "#%02x%02x%02x", c[0], c[1], c[2]);
  return b;
}
bool darkOnViridis(double t) { return t < 0.55; }

// A "nice" axis top >= v: 1, 2, 2.5 or 5 times a power of ten.
double niceCeil(double v) {
  if (!(v > 0))
    return 1;
  double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= v * (1 - 1e-12))
      return m * p;
  return 10 * p;
}

// Label every k-th of n items so labels are at least `minPx` apart.
int labelStep(double cellPx, double minPx) {
  int k = 1;
  while (k * cellPx < minPx)
    k *= 2;
  return k;
}

struct Mesh {
  std::vector<int64_t> dims;
  std::vector<std::string> names;
  int shardDim = -1, replicateDim = -1;
  int64_t G = 1, R = 1;

  explicit Mesh(const fb::Plan &p) {
    if (const fb::Mesh *m = p.mesh()) {
      for (uint32_t i = 0; i < size(m->dims()); ++i) {
        dims.push_back(m->dims()->Get(i)->size());
        names.push_back(str(m->dims()->Get(i)->name()));
      }
      shardDim = m->shard_dim();
      replicateDim = m->replicate_dim();
      G = m->num_shards() > 0 ? m->num_shards() : 1;
      R = m->num_replicas() > 0 ? m->num_replicas() : 1;
    }
  }
  int64_t slotRank(int64_t s, int64_t r) const {
    return common::slotRank(dims, shardDim, replicateDim, s, r);
  }
  std::string coords(int64_t rank) const {
    const std::vector<int64_t> c = common::rowMajorCoord(dims, rank);
    std::string o = "(";
    for (size_t i = 0; i < c.size(); ++i)
      o.append(i ? "," : "").append(i64(c[i]));
    return o + ")";
  }
  std::string text() const {
    std::string s;
    for (size_t i = 0; i < dims.size(); ++i)
      s.append(i ? "," : "").append(names[i] + "=" + i64(dims[i]));
    return s;
  }
  std::string shardName() const { return shardDim >= 0 ? names[shardDim] : "dp_shard"; }
  std::string replicateName() const {
    return replicateDim >= 0 ? names[replicateDim] : "dp_replicate";
  }
};

bool reached(const fb::Plan &p, fb::Stage s) {
  return static_cast<int>(p.stage()) >= static_cast<int>(s);
}

const char *kStyle = R"(
*{box-sizing:border-box}
body{font:14px/1.45 "DejaVu Sans","Liberation Sans",Arial,sans-serif;color:#1b2130;background:#fff;margin:0;padding:24px 28px;max-width:1340px}
h1{font-size:24px;margin:0 0 2px}
h2{font-size:17px;margin:30px 0 8px;padding-bottom:4px;border-bottom:1px solid #d5dae3}
p{margin:4px 0}
.sub{color:#4a5568;margin-bottom:14px}
.badge{display:inline-block;padding:1px 9px;border-radius:10px;font-size:13px;font-weight:bold;vertical-align:3px;margin-left:6px}
.ok{background:#d3f0dc;color:#14602f}.near{background:#e3ecfa;color:#1f4f8f}.warn{background:#fde6c4;color:#7a4500}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0 4px}
.card{border:1px solid #d5dae3;border-radius:6px;padding:6px 12px;min-width:132px;background:#f8fafc}
.card .k{font-size:11px;color:#5a6478;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:17px;font-weight:bold}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
th,td{border:1px solid #d5dae3;padding:3px 7px;text-align:right;white-space:nowrap;vertical-align:top}
th{background:#eef2f7;font-weight:bold;white-space:normal}
table.ranks th,table.ranks td{padding:2px 5px;font-size:11px}
td.l,th.l{text-align:left}
td.segs{text-align:left;white-space:normal;max-width:760px}
tr.gap td{text-align:center;color:#5a6478;background:#fafbfc;font-style:italic}
tr.agg td{background:#f4f6f9;font-weight:bold}
tr.hot td{background:#fff4e5}
.note{color:#5a6478;font-size:12px;margin:6px 0}
.seg{display:inline-block;margin:0 10px 0 0}
code{font-family:"DejaVu Sans Mono",monospace;font-size:12px}
svg{display:block;margin:6px 0}
svg text{font-family:"DejaVu Sans","Liberation Sans",Arial,sans-serif}
)";

// ---------------------------------------------------------------- sections

class Report {
public:
  explicit Report(const fb::Plan &p) : p_(p), mesh_(p) {
    if (const fb::Options *op = p.options())
      unit_.seconds = op->cost_model() == fb::CostModel::table;
  }

  std::string run() {
    const fb::Stats *s = reached(p_, fb::Stage::partition) ? p_.stats() : nullptr;
    std::string model = str(p_.model_name());
    if (model.empty())
      model = str(p_.source());
    std::string title = "dmuon plan: " + model + " on " + mesh_.text();
    if (s) {
      title += " \xC2\xB7 imbalance " + fmt("%.4f", s->imbalance());
      if (s->optimal())
        title += " (optimal)";
    }
    o_ += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
    o_ += "<meta name=\"generator\" content=\"" + esc(str(p_.producer())) + "\">\n";
    o_ += "<title>" + esc(title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
    header(s);
    if (s) {
      grid(*s);
      chart(*s);
    } else {
      section("mesh", "Mesh");
      o_ += "<p class=\"note\">Not partitioned yet (stage " + stageName() + ").</p>\n</section>\n";
    }
    hooks();
    ranks(s);
    o_ += "<p class=\"note\">Generated by " + esc(str(p_.producer())) +
          " from the plan buffer (format " + i64(p_.format_major()) + "." + i64(p_.format_minor()) +
          ", fingerprint <code>" + common::hex64(p_.fingerprint()) +
          "</code>). Self-contained: no scripts, no external resources.</p>\n";
    o_ += "</body>\n</html>\n";
    return std::move(o_);
  }

private:
  std::string stageName() const {
    const char *n = fb::EnumNameStage(p_.stage());
    return n && *n ? n : "?";
  }
  void section(const char *id, const std::string &heading) {
    o_ += "<section id=\"" + std::string(id) + "\">\n<h2>" + heading + "</h2>\n";
  }
  void card(const std::string &k, const std::string &v, const std::string &tip = "") {
    o_ += "<div class=\"card\"";
    if (!tip.empty())
      o_ += " title=\"" + esc(tip) + "\"";
    o_ += "><div class=\"k\">" + esc(k) + "</div><div class=\"v\">" + esc(v) + "</div></div>\n";
  }

  void header(const fb::Stats *s) {
    std::string model = str(p_.model_name());
    o_ += "<header id=\"summary\">\n<h1>" + esc(model.empty() ? "(unnamed model)" : model);
    if (s) {
      if (s->optimal())
        o_ += "<span class=\"badge ok\">optimal</span>";
      else if (s->imbalance() <= 1.01)
        o_ += "<span class=\"badge near\">within 1% of the bound</span>";
      else
        o_ += "<span class=\"badge warn\">" + fmt("%.2f", 100 * (s->imbalance() - 1)) +
              "% above the bound</span>";
    }
    o_ += "</h1>\n<p class=\"sub\">mesh <b>" + esc(mesh_.text()) + "</b> \xC2\xB7 " +
          i64(p_.mesh() ? p_.mesh()->world_size() : 0) + " ranks \xC2\xB7 " + i64(mesh_.G) +
          " shards \xC3\x97 " + i64(mesh_.R) + " replicas = " + i64(mesh_.G * mesh_.R) +
          " owner slots \xC2\xB7 source <code>" + esc(str(p_.source())) +
          "</code> \xC2\xB7 stage " + esc(stageName());
    if (const fb::Options *op = p_.options()) {
      o_ += " \xC2\xB7 cost model <b>" +
            std::string(op->cost_model() == fb::CostModel::table ? "table" : "flops") + "</b>";
      if (op->cost_table() && op->cost_table()->size())
        o_ += " (<code>" + esc(str(op->cost_table())) + "</code>)";
    }
    o_ += "</p>\n<div class=\"cards\">\n";
    if (s) {
      card("imbalance (max / LB)", fmt("%.4f", s->imbalance()) + (s->optimal() ? " optimal" : ""),
           "max slot load over the proven lower bound on the optimum");
      card("max slot load", unit_(s->max_load()));
      card("lower bound", unit_(s->lower_bound()),
           "proved by: " + str(s->lower_bound_kind()) + "; simple bound " +
               unit_(s->simple_lower_bound()));
      card("bound kind", str(s->lower_bound_kind()).empty() ? "-" : str(s->lower_bound_kind()));
      card("LPT max / LB",
           s->lower_bound() > 0 ? fmt("%.4f", s->lpt_max_load() / s->lower_bound()) : "-",
           "before refinement");
      card("total " + std::string(unit_.seconds ? "time" : "NS flops"), unit_(s->total_cost()));
      card("muon / adamw params", i64(s->muon_params()) + " / " + i64(s->adamw_params()));
      card("units", i64(size(p_.units())));
      if (reached(p_, fb::Stage::layout))
        card("max owners / hook group", i64(s->max_owners_per_hook_group()));
      card("layer-rule violations", i64(s->layer_rule_violations()));
    } else {
      card("params", i64(size(p_.params())));
    }
    if (reached(p_, fb::Stage::hooks))
      card("hook groups", i64(size(p_.hook_groups())));
    o_ += "</div>\n</header>\n";
  }

  // Mesh grid: one cell per owner slot, rows = replicate index, columns =
  // shard index, colour = NS load on [0, max].
  void grid(const fb::Stats &s) {
    const int64_t G = mesh_.G, R = mesh_.R;
    section("mesh", "Mesh: owner slots coloured by NS load");
    o_ += "<p class=\"note\">" + i64(R) + " " + esc(mesh_.replicateName()) + " row" +
          (R == 1 ? "" : "s") + " \xC3\x97 " + i64(G) + " " + esc(mesh_.shardName()) + " column" +
          (G == 1 ? "" : "s") +
          "; slot <i>i</i> = <i>r</i>\xC2\xB7G + <i>s</i>. Hover a cell for its rank and "
          "load; the busiest slot is outlined in red.</p>\n";
    const double left = 84, top = 34;
    const double cw = std::clamp((kWidth - left - 10) / static_cast<double>(G), 1.0, 110.0);
    const double ch =
        std::clamp(std::max(cw, std::min(18.0, 560.0 / static_cast<double>(R))), 1.0, 52.0);
    const double gw = cw * static_cast<double>(G), gh = ch * static_cast<double>(R);
    const double legendTop = top + gh + 34;
    const double height = legendTop + 46;
    const double width = std::max(left + gw + 10, left + 660.0);
    const uint32_t nLoad = size(s.slot_load());
    double maxLoad = 0;
    uint32_t busiest = 0;
    for (uint32_t i = 0; i < nLoad; ++i)
      if (s.slot_load()->Get(i) > maxLoad) {
        maxLoad = s.slot_load()->Get(i);
        busiest = i;
      }
    o_ += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(width) + "\" height=\"" +
          px(height) + "\" viewBox=\"0 0 " + px(width) + " " + px(height) +
          "\" role=\"img\" aria-label=\"mesh grid\">\n";
    o_ += "<defs><linearGradient id=\"viridis\" x1=\"0\" x2=\"1\" y1=\"0\" y2=\"0\">";
    for (int k = 0; k <= 8; ++k)
      o_ +=
          "<stop offset=\"" + fmt("%.3f", k / 8.0) + "\" stop-color=\"" + viridis(k / 8.0) + "\"/>";
    o_ += "</linearGradient></defs>\n";
    // Axis titles and tick labels.
    o_ += "<text x=\"" + px(left) + "\" y=\"12\" font-size=\"12\" fill=\"#4a5568\">" +
          esc(mesh_.shardName()) + " (s) \xE2\x86\x92</text>\n";
    o_ += "<text transform=\"translate(16 " + px(top + gh / 2) +
          ") rotate(90)\" font-size=\"12\" text-anchor=\"middle\" fill=\"#4a5568\">" +
          esc(mesh_.replicateName()) + " (r) \xE2\x86\x92</text>\n";
    const int colStep = labelStep(cw, 34);
    for (int64_t c = 0; c < G; c += colStep)
      o_ += "<text x=\"" + px(left + (static_cast<double>(c) + 0.5) * cw) + "\" y=\"" +
            px(top - 6) + "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#4a5568\">" + i64(c) +
            "</text>\n";
    const int rowStep = labelStep(ch, 13);
    for (int64_t r = 0; r < R; r += rowStep)
      o_ += "<text x=\"" + px(left - 6) + "\" y=\"" +
            px(top + (static_cast<double>(r) + 0.5) * ch + 3.5) +
            "\" font-size=\"10\" text-anchor=\"end\" fill=\"#4a5568\">" + i64(r) + "</text>\n";
    // Cells.
    const bool labels = cw >= 56 && ch >= 34;
    const double lb = s.lower_bound();
    o_ += "<g shape-rendering=\"crispEdges\">\n";
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < G; ++c) {
        uint32_t i = static_cast<uint32_t>(r * G + c);
        double load = i < nLoad ? s.slot_load()->Get(i) : 0;
        double t = maxLoad > 0 ? load / maxLoad : 0;
        double x = left + static_cast<double>(c) * cw, y = top + static_cast<double>(r) * ch;
        int64_t rank = mesh_.slotRank(c, r);
        o_ += "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(cw) + "\" height=\"" +
              px(ch) + "\" fill=\"" + viridis(t) + "\"";
        if (cw >= 4)
          o_ += " stroke=\"#fff\" stroke-width=\"" + std::string(cw >= 12 ? "1" : "0.5") + "\"";
        o_ += "><title>slot " + i64(i) + " (s=" + i64(c) + ", r=" + i64(r) + ") rank " + i64(rank) +
              ": " + unit_(load);
        if (lb > 0)
          o_ += ", " + fmt("%.2f", 100 * load / lb) + "% of LB";
        o_ += "</title></rect>\n";
        if (labels) {
          const char *ink = darkOnViridis(t) ? "#fff" : "#1b2130";
          o_ += "<text x=\"" + px(x + cw / 2) + "\" y=\"" + px(y + ch / 2 - 2) +
                "\" font-size=\"11\" text-anchor=\"middle\" fill=\"" + ink + "\">rank " +
                i64(rank) + "</text>";
          if (lb > 0)
            o_ += "<text x=\"" + px(x + cw / 2) + "\" y=\"" + px(y + ch / 2 + 11) +
                  "\" font-size=\"10\" text-anchor=\"middle\" fill=\"" + ink + "\">" +
                  fmt("%.1f", 100 * load / lb) + "%</text>";
          o_ += "\n";
        }
      }
    o_ += "</g>\n";
    if (nLoad > 0 && maxLoad > 0) {
      int64_t bc = busiest % G, br = busiest / G;
      o_ += "<rect x=\"" + px(left + static_cast<double>(bc) * cw) + "\" y=\"" +
            px(top + static_cast<double>(br) * ch) + "\" width=\"" + px(cw) + "\" height=\"" +
            px(ch) + "\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"" +
            std::string(cw >= 8 ? "2.5" : "1.5") + "\"><title>busiest slot " + i64(busiest) +
            "</title></rect>\n";
    }
    // Legend: the colour scale from 0 to the max load, with the bound marked.
    const double lw = 360, lx = left;
    o_ += "<text x=\"" + px(lx) + "\" y=\"" + px(legendTop - 6) +
          "\" font-size=\"11\" fill=\"#4a5568\">NS load per slot (" + unit_.name() + ")</text>\n";
    o_ += "<rect x=\"" + px(lx) + "\" y=\"" + px(legendTop) + "\" width=\"" + px(lw) +
          "\" height=\"12\" fill=\"url(#viridis)\" stroke=\"#8892a6\" stroke-width=\"0.5\"/>\n";
    for (int k = 0; k <= 2; ++k) {
      double v = maxLoad * k / 2;
      o_ += "<text x=\"" + px(lx + lw * k / 2) + "\" y=\"" + px(legendTop + 26) +
            "\" font-size=\"10\" text-anchor=\"" +
            (k == 0   ? "start"
             : k == 2 ? "end"
                      : "middle") +
            "\" fill=\"#4a5568\">" + unit_(v) + (k == 2 ? " (max)" : "") + "</text>\n";
    }
    if (maxLoad > 0 && lb > 0 && lb <= maxLoad) {
      double x = lx + lw * lb / maxLoad;
      o_ += "<line x1=\"" + px(x) + "\" x2=\"" + px(x) + "\" y1=\"" + px(legendTop - 3) +
            "\" y2=\"" + px(legendTop + 15) +
            "\" stroke=\"#d62728\" stroke-width=\"1.5\"><title>lower bound " + unit_(lb) +
            "</title></line>\n";
      o_ += "<text x=\"" + px(lx + lw + 12) + "\" y=\"" + px(legendTop + 10) +
            "\" font-size=\"10\" fill=\"#d62728\">red tick: lower bound " + unit_(lb) + "</text>\n";
    }
    o_ += "</svg>\n</section>\n";
  }

  // Bar chart of slot loads, with the lower bound as a line.
  void chart(const fb::Stats &s) {
    section("loads", "Slot loads against the lower bound");
    const uint32_t n = size(s.slot_load());
    const double lb = s.lower_bound();
    double maxLoad = 0, minLoad = n ? s.slot_load()->Get(0) : 0;
    for (uint32_t i = 0; i < n; ++i) {
      maxLoad = std::max(maxLoad, s.slot_load()->Get(i));
      minLoad = std::min(minLoad, s.slot_load()->Get(i));
    }
    o_ +=
        "<p class=\"note\">" + i64(n) + " slots in slot order; min " + unit_(minLoad) + ", max " +
        unit_(maxLoad) + ", lower bound " + unit_(lb) + " (" +
        esc(str(s.lower_bound_kind()).empty() ? std::string("simple") : str(s.lower_bound_kind())) +
        ")";
    if (lb > 0)
      o_ +=
          "; max / LB = " + fmt("%.4f", maxLoad / lb) + ", min / LB = " + fmt("%.4f", minLoad / lb);
    o_ += ". Bars above 1% over the bound are orange.</p>\n";
    const double left = 92, right = 150, top = 14, ph = 300, bottom = 40;
    const double pw = kWidth - left - right;
    const double height = top + ph + bottom;
    const double yTop = niceCeil(std::max(maxLoad, lb) * 1.04);
    auto yOf = [&](double v) { return top + ph - ph * v / yTop; };
    o_ += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(kWidth) + "\" height=\"" +
          px(height) + "\" viewBox=\"0 0 " + px(kWidth) + " " + px(height) +
          "\" role=\"img\" aria-label=\"slot load chart\">\n";
    // Y grid and ticks.
    for (int k = 0; k <= 4; ++k) {
      double v = yTop * k / 4, y = yOf(v);
      o_ += "<line x1=\"" + px(left) + "\" x2=\"" + px(left + pw) + "\" y1=\"" + px(y) +
            "\" y2=\"" + px(y) + "\" stroke=\"#e3e7ee\" stroke-width=\"1\"/>\n";
      o_ += "<text x=\"" + px(left - 6) + "\" y=\"" + px(y + 3.5) +
            "\" font-size=\"10\" text-anchor=\"end\" fill=\"#4a5568\">" + unit_(v) + "</text>\n";
    }
    // Bars.
    const double bw = n ? pw / n : pw;
    const double gap = bw >= 6 ? std::min(2.0, bw * 0.15) : 0;
    const double hot = lb * 1.01;
    if (n <= kMaxBarTitles) {
      for (uint32_t i = 0; i < n; ++i) {
        double v = s.slot_load()->Get(i), y = yOf(v);
        o_ += "<rect x=\"" + px(left + i * bw + gap / 2) + "\" y=\"" + px(y) + "\" width=\"" +
              px(std::max(bw - gap, 0.5)) + "\" height=\"" + px(top + ph - y) + "\" fill=\"" +
              (lb > 0 && v > hot ? "#f28e2b" : "#4c78a8") + "\"><title>slot " + i64(i) +
              " (s=" + i64(i % mesh_.G) + ", r=" + i64(i / mesh_.G) + "): " + unit_(v);
        if (lb > 0)
          o_ += ", " + fmt("%.4f", v / lb) + " \xC3\x97 LB";
        o_ += "</title></rect>\n";
      }
    } else {
      // One path per colour: thousands of bars without thousands of elements.
      for (int pass = 0; pass < 2; ++pass) {
        std::string d;
        for (uint32_t i = 0; i < n; ++i) {
          double v = s.slot_load()->Get(i);
          bool isHot = lb > 0 && v > hot;
          if (isHot != (pass == 1) || v <= 0)
            continue;
          d += "M" + px(left + i * bw) + " " + px(top + ph) + "V" + px(yOf(v)) + "h" +
               px(std::max(bw, 0.6)) + "V" + px(top + ph) + "Z";
        }
        if (!d.empty())
          o_ += "<path d=\"" + d + "\" fill=\"" + (pass ? "#f28e2b" : "#4c78a8") + "\"/>\n";
      }
    }
    // Axes.
    o_ += "<line x1=\"" + px(left) + "\" x2=\"" + px(left + pw) + "\" y1=\"" + px(top + ph) +
          "\" y2=\"" + px(top + ph) + "\" stroke=\"#4a5568\"/>\n";
    o_ += "<line x1=\"" + px(left) + "\" x2=\"" + px(left) + "\" y1=\"" + px(top) + "\" y2=\"" +
          px(top + ph) + "\" stroke=\"#4a5568\"/>\n";
    const int xStep = labelStep(bw, 40);
    for (uint32_t i = 0; i < n; i += xStep)
      o_ += "<text x=\"" + px(left + (i + 0.5) * bw) + "\" y=\"" + px(top + ph + 14) +
            "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#4a5568\">" + i64(i) + "</text>\n";
    o_ += "<text x=\"" + px(left + pw / 2) + "\" y=\"" + px(top + ph + 32) +
          "\" font-size=\"11\" text-anchor=\"middle\" fill=\"#4a5568\">owner slot i = r\xC2\xB7G + "
          "s</text>\n";
    // The bound (and the max, when it is visibly higher).
    if (lb > 0) {
      double y = yOf(lb);
      o_ +=
          "<line x1=\"" + px(left) + "\" x2=\"" + px(left + pw) + "\" y1=\"" + px(y) + "\" y2=\"" +
          px(y) +
          "\" stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"7 4\"><title>lower bound " +
          unit_(lb) + "</title></line>\n";
      o_ += "<text x=\"" + px(left + pw + 8) + "\" y=\"" + px(y + 4) +
            "\" font-size=\"11\" fill=\"#d62728\">lower bound</text>\n";
      o_ += "<text x=\"" + px(left + pw + 8) + "\" y=\"" + px(y + 18) +
            "\" font-size=\"10\" fill=\"#d62728\">" + unit_(lb) + "</text>\n";
      if (maxLoad > lb) {
        double ym = yOf(maxLoad);
        o_ += "<line x1=\"" + px(left) + "\" x2=\"" + px(left + pw) + "\" y1=\"" + px(ym) +
              "\" y2=\"" + px(ym) +
              "\" stroke=\"#1b2130\" stroke-width=\"1\" stroke-dasharray=\"2 3\"/>\n";
        o_ += "<text x=\"" + px(left + pw + 8) + "\" y=\"" + px(std::min(ym, y - 16) + 4) +
              "\" font-size=\"11\" fill=\"#1b2130\">max " + fmt("%.4f", maxLoad / lb) +
              "\xC3\x97</text>\n";
      }
    }
    o_ += "</svg>\n</section>\n";
  }

  void hooks() {
    if (!reached(p_, fb::Stage::hooks))
      return;
    const bool laidOut = reached(p_, fb::Stage::layout);
    const uint32_t n = size(p_.hook_groups());
    section("hook-groups", "Hook groups and their owners");
    o_ += "<p class=\"note\">" + i64(n) +
          " hook groups in forward order. Each owner holds one contiguous segment of the "
          "group's packed buffer: its params move in one broadcast and one reduce.</p>\n";
    o_ += "<table>\n<tr><th>#</th><th class=\"l\">group</th><th>params</th>";
    if (laidOut)
      o_ += "<th>buffer</th><th>reduce buffer</th><th>owners</th><th class=\"l\">owner "
            "segments: rank (s,r) bytes \xC2\xB7 params</th>";
    o_ += "</tr>\n";
    const uint32_t shown = std::min(n, kMaxHookRows);
    for (uint32_t i = 0; i < shown; ++i) {
      const fb::HookGroup *h = p_.hook_groups()->Get(i);
      o_ += "<tr><td>" + i64(i) + "</td><td class=\"l\"><code>" + esc(str(h->name())) +
            "</code></td><td>" + i64(size(h->params())) + "</td>";
      if (laidOut) {
        const uint32_t ns = size(h->segments());
        o_ += "<td title=\"" + grouped(h->buffer_bytes()) + " bytes\">" +
              bytes(double(h->buffer_bytes())) + "</td><td title=\"" +
              grouped(h->reduce_buffer_bytes()) + " bytes\">" +
              bytes(double(h->reduce_buffer_bytes())) + "</td><td>" + i64(ns) +
              "</td><td class=\"segs\">";
        for (uint32_t k = 0; k < ns && k < kMaxSegmentsShown; ++k) {
          const fb::Segment *sg = h->segments()->Get(k);
          std::string names;
          for (uint32_t q = 0; q < size(sg->params()) && q < 8; ++q) {
            int32_t pi = sg->params()->Get(q);
            if (pi >= 0 && static_cast<uint32_t>(pi) < size(p_.params()))
              names.append(q ? ", " : "").append(str(p_.params()->Get(pi)->name()));
          }
          if (size(sg->params()) > 8)
            names += ", \xE2\x80\xA6";
          o_ += "<span class=\"seg\" title=\"" + esc(names) + "\">rank " + i64(sg->owner_rank()) +
                " (" + i64(sg->owner_shard()) + "," + i64(sg->owner_replicate()) + ") " +
                bytes(double(sg->bytes())) + " \xC2\xB7 " + i64(size(sg->params())) + "p</span>";
        }
        if (ns > kMaxSegmentsShown)
          o_ += "<span class=\"seg\"><i>\xE2\x80\xA6 and " + i64(ns - kMaxSegmentsShown) +
                " more owners</i></span>";
        o_ += "</td>";
      }
      o_ += "</tr>\n";
    }
    o_ += "</table>\n";
    if (shown < n)
      o_ += "<p class=\"note\">Showing the first " + i64(shown) + " of " + i64(n) +
            " hook groups (the full list: <code>dmuon-plan plan.bin</code>).</p>\n";
    o_ += "</section>\n";
  }

  void ranks(const fb::Stats *s) {
    if (!s || !reached(p_, fb::Stage::layout))
      return;
    const uint32_t n = size(s->ranks());
    section("ranks", "Per-rank memory and communication (per training step)");
    o_ += "<p class=\"note\">Bytes are logical collective payloads as the runtime counts them "
          "(docs/plan-format.md \xC2\xA7 Communication accounting). Master and momentum are "
          "fp32 copies; peak buffer is the largest unsharded hook-group buffer resident at "
          "once.</p>\n";
    // The verifier lets a plan omit the per-rank figures (an empty list).
    if (n == 0) {
      o_ += "<p class=\"note\">This plan records no per-rank figures.</p>\n";
      return;
    }
    // Which rows: all ranks if few; else the first kMaxRankRows and the
    // extremes (busiest NS load, most master bytes, most bytes moved).
    auto moved = [](const fb::RankFigures *r) {
      return double(r->broadcast_send_bytes()) + double(r->broadcast_recv_bytes()) +
             double(r->reduce_send_bytes()) + double(r->reduce_recv_bytes()) +
             double(r->replicate_send_bytes()) + double(r->replicate_recv_bytes()) +
             2 * double(r->allreduce_bytes()) + double(r->gather_send_bytes()) +
             double(r->gather_recv_bytes()) + double(r->scatter_send_bytes()) +
             double(r->scatter_recv_bytes());
    };
    // The model-parallel gather/scatter columns only when some rank has any.
    bool mp = false;
    for (uint32_t i = 0; i < n && !mp; ++i) {
      const fb::RankFigures *r = s->ranks()->Get(i);
      mp = r->gather_send_bytes() || r->gather_recv_bytes() || r->scatter_send_bytes() ||
           r->scatter_recv_bytes();
    }
    const std::string span = mp ? "20" : "16";
    uint32_t busiest = 0, heaviest = 0, chattiest = 0;
    for (uint32_t i = 1; i < n; ++i) {
      const fb::RankFigures *r = s->ranks()->Get(i);
      if (r->ns_flops() > s->ranks()->Get(busiest)->ns_flops())
        busiest = i;
      if (r->master_bytes() > s->ranks()->Get(heaviest)->master_bytes())
        heaviest = i;
      if (moved(r) > moved(s->ranks()->Get(chattiest)))
        chattiest = i;
    }
    std::vector<uint32_t> rows;
    const uint32_t head = n <= kMaxRankRows + 8 ? n : kMaxRankRows;
    for (uint32_t i = 0; i < head; ++i)
      rows.push_back(i);
    for (uint32_t x : {busiest, heaviest, chattiest})
      if (x >= head && std::find(rows.begin(), rows.end(), x) == rows.end())
        rows.push_back(x);
    std::sort(rows.begin() + head, rows.end());

    const char *cols[] = {"owned params", "owned elements", "master",     "momentum",
                          "peak buffer",  "NS flops",       "bcast send", "bcast recv",
                          "reduce send",  "reduce recv",    "repl send",  "repl recv",
                          "allreduce",    "moved"};
    std::string coordHead;
    for (size_t i = 0; i < mesh_.names.size(); ++i)
      coordHead.append(i ? "," : "").append(mesh_.names[i]);
    o_ += "<table class=\"ranks\">\n<tr><th>rank</th><th class=\"l\">coord<br>(" + esc(coordHead) +
          ")</th>";
    for (const char *c : cols) {
      if (mp && std::string(c) == "moved")
        o_ += "<th>gather send</th><th>gather recv</th><th>scatter send</th>"
              "<th>scatter recv</th>";
      o_ += std::string("<th>") + c + "</th>";
    }
    o_ += "</tr>\n";
    auto cellBytes = [&](int64_t b) {
      return "<td title=\"" + grouped(b) + " bytes\">" + bytes(double(b)) + "</td>";
    };
    auto row = [&](const fb::RankFigures *r, const char *cls) {
      o_ += std::string("<tr") + (cls ? std::string(" class=\"") + cls + "\"" : "") + "><td>" +
            i64(r->rank()) + "</td><td class=\"l\">" + mesh_.coords(r->rank()) + "</td><td>" +
            i64(r->owned_params()) + "</td><td>" + grouped(r->owned_elements()) + "</td>" +
            cellBytes(r->master_bytes()) + cellBytes(r->momentum_bytes()) +
            cellBytes(r->peak_buffer_bytes()) + "<td>" + CostUnit{}(r->ns_flops()) + "</td>" +
            cellBytes(r->broadcast_send_bytes()) + cellBytes(r->broadcast_recv_bytes()) +
            cellBytes(r->reduce_send_bytes()) + cellBytes(r->reduce_recv_bytes()) +
            cellBytes(r->replicate_send_bytes()) + cellBytes(r->replicate_recv_bytes()) +
            cellBytes(r->allreduce_bytes()) +
            (mp ? cellBytes(r->gather_send_bytes()) + cellBytes(r->gather_recv_bytes()) +
                      cellBytes(r->scatter_send_bytes()) + cellBytes(r->scatter_recv_bytes())
                : std::string()) +
            "<td>" + bytes(moved(r)) + "</td></tr>\n";
    };
    uint32_t prev = 0;
    bool first = true;
    for (uint32_t i : rows) {
      if (!first && i != prev + 1)
        o_ += "<tr class=\"gap\"><td colspan=\"" + span + "\">\xE2\x8B\xAF " + i64(i - prev - 1) +
              " ranks not shown \xE2\x8B\xAF</td></tr>\n";
      const fb::RankFigures *r = s->ranks()->Get(i);
      const char *cls = nullptr;
      if (n > 1 && (i == busiest || i == heaviest || i == chattiest))
        cls = "hot";
      row(r, cls);
      prev = i;
      first = false;
    }
    if (n > 0 && prev + 1 < n)
      o_ += "<tr class=\"gap\"><td colspan=\"" + span + "\">\xE2\x8B\xAF " + i64(n - prev - 1) +
            " ranks not shown \xE2\x8B\xAF</td></tr>\n";
    // Min and max over all ranks.
    if (n > 1) {
      auto agg = [&](bool isMax) {
        auto pick = [&](auto get) {
          double v = get(s->ranks()->Get(0));
          for (uint32_t i = 1; i < n; ++i)
            v = isMax ? std::max(v, get(s->ranks()->Get(i))) : std::min(v, get(s->ranks()->Get(i)));
          return v;
        };
#define DM_PICK(field) pick([](const fb::RankFigures *r) { return double(r->field()); })
        auto b = [&](double v) { return "<td>" + bytes(v) + "</td>"; };
        o_ += std::string("<tr class=\"agg\"><td>") + (isMax ? "max" : "min") +
              "</td><td class=\"l\">all " + i64(n) + " ranks</td><td>" +
              fmt("%.0f", DM_PICK(owned_params)) + "</td><td>" +
              grouped(static_cast<int64_t>(DM_PICK(owned_elements))) + "</td>" +
              b(DM_PICK(master_bytes)) + b(DM_PICK(momentum_bytes)) +
              b(DM_PICK(peak_buffer_bytes)) + "<td>" + CostUnit{}(DM_PICK(ns_flops)) + "</td>" +
              b(DM_PICK(broadcast_send_bytes)) + b(DM_PICK(broadcast_recv_bytes)) +
              b(DM_PICK(reduce_send_bytes)) + b(DM_PICK(reduce_recv_bytes)) +
              b(DM_PICK(replicate_send_bytes)) + b(DM_PICK(replicate_recv_bytes)) +
              b(DM_PICK(allreduce_bytes)) +
              (mp ? b(DM_PICK(gather_send_bytes)) + b(DM_PICK(gather_recv_bytes)) +
                        b(DM_PICK(scatter_send_bytes)) + b(DM_PICK(scatter_recv_bytes))
                  : std::string()) +
              b(pick(moved)) + "</tr>\n";
#undef DM_PICK
      };
      agg(false);
      agg(true);
    }
    o_ += "</table>\n";
    if (rows.size() < n)
      o_ += "<p class=\"note\">Showing " + i64(rows.size()) + " of " + i64(n) +
            " ranks: the first " + i64(head) +
            " and the busiest (NS load), the one with the most master bytes and the one "
            "moving the most bytes (highlighted). The min / max rows cover all ranks.</p>\n";
    else if (n > 1)
      o_ += "<p class=\"note\">Highlighted: the busiest rank (NS load), the one with the most "
            "master bytes and the one moving the most bytes.</p>\n";
    o_ += "</section>\n";
  }

  const fb::Plan &p_;
  Mesh mesh_;
  CostUnit unit_;
  std::string o_;
};

} // namespace

std::string printHtml(const fb::Plan &plan) { return Report(plan).run(); }

} // namespace dmuon::planfile
