// The sum of a sharded-route param's averaged gradient shard along the
// data-carrying dims it is Replicate on (their ranks saw other tokens);
// counted as an all-reduce. (The owner route's column spans those dims
// instead; the replicated route batches its all-reduces by group.)
#ifndef DMUON_RUNTIME_ROUTES_ALONGDATA_H
#define DMUON_RUNTIME_ROUTES_ALONGDATA_H

#include "core/Context.h"
#include "core/Params.h"

namespace dmuon::rt {

inline Status sumAlongData(const Context &ctx, const ParamRt &p, float *grad, size_t count) {
  if (p.alongSize <= 1)
    return Status::ok();
  RequestId id;
  DMUON_RETURN_IF_ERROR(ctx.backend.allReduceSum(p.alongData, grad, count, id));
  DMUON_RETURN_IF_ERROR(ctx.backend.wait(id));
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(float);
  ctx.counters.count(DMUON_COLLECTIVE_ALLREDUCE, bytes, bytes);
  return Status::ok();
}

} // namespace dmuon::rt

#endif
