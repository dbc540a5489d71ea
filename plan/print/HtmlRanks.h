// The HTML report's per-rank sections (PrintHtml.cpp): the table of each
// rank's memory and communication figures, and the per-rank memory chart
// (HtmlMemory.h) over the same ranks.
#ifndef DMUON_PLAN_PRINT_HTMLRANKS_H
#define DMUON_PLAN_PRINT_HTMLRANKS_H

#include "dmuon/plan_generated.h"
#include "plan/print/PrintCommon.h"

#include <string>

namespace dmuon::planfile::print {

// The "ranks" <section> and the memory chart of a laid-out plan. Big worlds
// stay readable: the table lists the first ranks and the extremes, and rows
// for min and max over all ranks.
std::string htmlRanks(const plan::Plan &plan, const MeshView &mesh);

} // namespace dmuon::planfile::print

#endif
