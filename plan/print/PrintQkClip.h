// The QK-Clip pairs of a plan (format 1.2) in the text and JSON forms:
// one section after the params, from the validate stage on.
#ifndef DMUON_PLAN_PRINT_PRINTQKCLIP_H
#define DMUON_PLAN_PRINT_PRINTQKCLIP_H

#include "plan/print/JsonWriter.h"
#include "plan/print/PrintCommon.h"

#include <string>

namespace dmuon::planfile::print {

// "qk_clip:" and one line per pair; nothing for a plan without pairs.
void textQkClip(const View &v, std::string &o);
// "qk_clip": [{"query", "key", "heads", "key_heads", "head_dim"}, ...].
void jsonQkClip(Json &j, const View &v);

} // namespace dmuon::planfile::print

#endif
