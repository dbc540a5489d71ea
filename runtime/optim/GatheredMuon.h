// Muon for a matrix sharded on a matrix dim over a model-parallel group:
// every shard forms its momentum input, the group gathers it onto the rank
// the plan chose, that rank runs NS on the whole matrix, and each shard gets
// its slice of the result back.
#ifndef DMUON_RUNTIME_OPTIM_GATHEREDMUON_H
#define DMUON_RUNTIME_OPTIM_GATHEREDMUON_H

#include "core/Context.h"
#include "core/Params.h"

namespace dmuon::rt {

// Kept across steps, grown to the largest gathered matrix.
struct GatherScratch {
  DeviceArray u, ortho, chunks, full;
};

// Muon on `p` from its averaged gradient `grad`.
Status gatheredMuonStep(const Context &ctx, ParamRt &p, const float *grad, const MuonHyper &h,
                        GatherScratch &scratch, DeviceArray &blockScratch);

} // namespace dmuon::rt

#endif
