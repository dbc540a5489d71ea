// The human and tool forms of a plan: line-oriented text (for FileCheck),
// JSON (a public interface, docs/plan-format.md), a short summary and an HTML
// report. Both dmuonc --emit=text|json|html and dmuon-plan print through
// here, so their output is identical by construction.
//
// plan/print is a static library for the tools (dmuonc, dmuon-plan,
// fuzz_plan, the unit tests), not part of libdmuon; it needs no LLVM. One
// file per form: PrintText.cpp, PrintJson.cpp, PrintSummary.cpp,
// PrintHtml.cpp; PrintCommon.h holds what they share.
#ifndef DMUON_PLAN_PRINT_PLANPRINTER_H
#define DMUON_PLAN_PRINT_PLANPRINTER_H

#include "dmuon/plan_generated.h"

#include <string>

namespace dmuon {

// The forms of a plan the tools write (their --emit): dmuonc writes Binary
// (its default), Text, Json or Html; dmuon-plan prints Text (its default),
// Json, Summary or Html.
enum class PlanForm { Binary, Text, Json, Summary, Html };

} // namespace dmuon

namespace dmuon::planfile {

std::string printText(const dmuon::plan::Plan &plan);
std::string printJson(const dmuon::plan::Plan &plan);
std::string printSummary(const dmuon::plan::Plan &plan);
// A self-contained HTML report (inline CSS and SVG, no scripts, no external
// references): mesh grid coloured by NS load, slot loads against the lower
// bound, hook groups with their owners, per-rank figures.
std::string printHtml(const dmuon::plan::Plan &plan);

} // namespace dmuon::planfile

#endif
