#include "plan/print/HtmlMemory.h"
#include "plan/print/HtmlFormat.h"

#include <algorithm>

namespace dmuon::planfile::print {

// Model state first (masters, momentum, values, moments), then what a step
// holds for a while (gradients, buffers).
const MemoryCategory kMemoryCategories[kNumMemoryCategories] = {
    {"masters", "#3b528b", [](const plan::RankFigures &r) { return r.master_bytes(); }},
    {"momentum", "#21918c", [](const plan::RankFigures &r) { return r.momentum_bytes(); }},
    {"values", "#5ec962", [](const plan::RankFigures &r) { return r.value_bytes(); }},
    {"adam moments", "#addc30", [](const plan::RankFigures &r) { return r.adam_moment_bytes(); }},
    {"grads", "#fde725", [](const plan::RankFigures &r) { return r.grad_bytes(); }},
    {"buffers (peak)", "#b5b5b5", [](const plan::RankFigures &r) { return r.peak_buffer_bytes(); }},
};

std::string htmlMemoryChart(const std::vector<common::RankRows::Listed> &listed,
                            const std::vector<uint32_t> &rows) {
  constexpr double kLabel = 70, kBar = 520, kRow = 16, kLegend = 22;
  double largest = 0;
  for (uint32_t i : rows)
    largest = std::max(largest, double(listed[i].row->memory_bytes()));
  std::string o = "<section id=\"memory\">\n<h2>Per-rank memory</h2>\n"
                  "<p class=\"note\">Each bar is one rank's memory by category "
                  "(dmuon_runtime_memory reports the same); the largest is " +
                  esc(bytes(largest)) + ".</p>\n";
  if (largest <= 0)
    return o + "<p class=\"note\">This plan records no memory figures.</p>\n</section>\n";
  const double height = kLegend + kRow * double(rows.size()) + 4;
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(kLabel + kBar + 10) +
       "\" height=\"" + px(height) + "\" role=\"img\" aria-label=\"per-rank memory\">\n";
  double x = kLabel;
  for (const MemoryCategory &c : kMemoryCategories) { // legend
    o += "<rect x=\"" + px(x) + "\" y=\"4\" width=\"10\" height=\"10\" fill=\"" + c.colour +
         "\"/><text x=\"" + px(x + 13) + "\" y=\"13\" font-size=\"11\">" + c.name + "</text>\n";
    x += 86;
  }
  double y = kLegend;
  for (uint32_t i : rows) {
    const plan::RankFigures &r = *listed[i].row;
    const std::string label = listed[i].label();
    o += "<text x=\"0\" y=\"" + px(y + 11) + "\" font-size=\"11\">" + esc(label) + "</text>\n";
    x = kLabel;
    for (const MemoryCategory &c : kMemoryCategories) {
      const double w = kBar * double(c.bytes(r)) / largest;
      if (w <= 0)
        continue;
      o += "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(w) +
           "\" height=\"12\" fill=\"" + c.colour + "\"><title>" + esc(label) + " " +
           c.name + ": " + esc(bytes(double(c.bytes(r)))) + "</title></rect>\n";
      x += w;
    }
    y += kRow;
  }
  return o + "</svg>\n</section>\n";
}

} // namespace dmuon::planfile::print
