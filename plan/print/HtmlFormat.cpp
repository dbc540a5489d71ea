// Formatting for the HTML report (HtmlFormat.h).
#include "plan/print/HtmlFormat.h"

#include "plan/print/PrintCommon.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace dmuon::planfile::print {

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

std::string grouped(int64_t v) {
  std::string d = std::to_string(v < 0 ? -v : v), o;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i && (d.size() - i) % 3 == 0)
      o += ',';
    o += d[i];
  }
  return v < 0 ? "-" + o : o;
}

std::string bytes(double b) { return humanBytes(b, 6); }

std::string CostUnit::operator()(double v) const {
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

double niceCeil(double v) {
  if (!(v > 0))
    return 1;
  double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= v * (1 - 1e-12))
      return m * p;
  return 10 * p;
}

int labelStep(double cellPx, double minPx) {
  int k = 1;
  while (k * cellPx < minPx)
    k *= 2;
  return k;
}

const char *const kHtmlStyle = R"(
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

} // namespace dmuon::planfile::print
