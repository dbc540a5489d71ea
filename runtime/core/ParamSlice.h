// Which slice of a param a rank holds (DTensor's chunking rule), for the C
// ABI's dmuon_plan_param_slice: a host computes what to bind from it.
#ifndef DMUON_RUNTIME_CORE_PARAMSLICE_H
#define DMUON_RUNTIME_CORE_PARAMSLICE_H

#include "base/Status.h"
#include "dmuon/plan_generated.h"

namespace dmuon::rt {

Status paramSlice(const dmuon::plan::Plan &plan, int index, int rank, dmuon_param_slice_t &out);

} // namespace dmuon::rt

#endif
