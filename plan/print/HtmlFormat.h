// Formatting for the HTML report (PrintHtml.cpp): escaping, numbers, byte
// and cost units, the colour scale and axis ticks, and the page's CSS.
#ifndef DMUON_PLAN_PRINT_HTMLFORMAT_H
#define DMUON_PLAN_PRINT_HTMLFORMAT_H

#include <cstdint>
#include <string>

namespace dmuon::planfile::print {

// Text for HTML content and attribute values.
std::string esc(const std::string &s);
// snprintf of one double.
std::string fmt(const char *f, double v);
inline std::string px(double v) { return fmt("%.2f", v); }
inline std::string i64(int64_t v) { return std::to_string(v); }
// 1234567 -> "1,234,567"
std::string grouped(int64_t v);
// "512 B", "1.50 KiB", ... up to EiB.
std::string bytes(double b);

// A cost in the plan's unit: NS flops (SI prefixes) or measured seconds.
struct CostUnit {
  bool seconds = false;
  std::string operator()(double v) const;
  const char *name() const { return seconds ? "measured seconds" : "NS flops"; }
};

// Viridis, 9 stops: 0 -> dark purple, 1 -> yellow.
std::string viridis(double t);
// Whether text on viridis(t) should be white.
inline bool darkOnViridis(double t) { return t < 0.55; }
// A "nice" axis top >= v: 1, 2, 2.5 or 5 times a power of ten.
double niceCeil(double v);
// Label every k-th of n items so labels are at least `minPx` apart.
int labelStep(double cellPx, double minPx);

// The page's style sheet.
extern const char *const kHtmlStyle;

} // namespace dmuon::planfile::print

#endif
