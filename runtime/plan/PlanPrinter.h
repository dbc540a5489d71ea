// The human and tool forms of a plan: line-oriented text (for FileCheck),
// JSON (a public interface, docs/plan-format.md) and a short summary. Both
// dmuonc --emit=text|json and dmuon-plan print through here, so their output
// is identical by construction.
#ifndef DMUON_RUNTIME_PLAN_PLANPRINTER_H
#define DMUON_RUNTIME_PLAN_PLANPRINTER_H

#include "dmuon/plan_generated.h"

#include <string>

namespace dmuon::planfile {

std::string printText(const dmuon::plan::Plan &plan);
std::string printJson(const dmuon::plan::Plan &plan);
std::string printSummary(const dmuon::plan::Plan &plan);
// A self-contained HTML report (inline CSS and SVG, no scripts, no external
// references): mesh grid coloured by NS load, slot loads against the lower
// bound, hook groups with their owners, per-rank figures. PlanHtml.cpp.
std::string printHtml(const dmuon::plan::Plan &plan);

} // namespace dmuon::planfile

#endif
