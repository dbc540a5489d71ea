// The sharded route (FSDP2's way with the large non-Muon params: embeddings,
// output heads): every dp_shard rank keeps one flat shard of the param, its
// AdamW moments and its gradient. A hook group's unshard all-gathers the
// shards into the group's packed buffer; its reduce reduce-scatters the
// gradients back to the shards (phase 1, over dp_shard) and all-reduces the
// shards over dp_replicate (phase 2, HSDP). OwnerRoute drives the group's
// lifecycle and calls these at the same points as its own collectives.
#ifndef DMUON_RUNTIME_ROUTES_SHARDEDROUTE_H
#define DMUON_RUNTIME_ROUTES_SHARDEDROUTE_H

#include "core/Context.h"
#include "core/Params.h"

#include <vector>

namespace dmuon::rt {

class ShardedRoute {
public:
  Status init(const Context &ctx, std::vector<ParamRt> &params, int numGroups);

  // This rank's shards of group g, cast to the param dtype into their place
  // in `packed`, then gathered from every shard.
  Status allGather(int g, uint8_t *packed, std::vector<RequestId> &requests);
  // Phase 1: every gradient of group g summed over dp_shard onto its shards.
  Status reduceScatter(int g, uint8_t *grad, std::vector<RequestId> &requests);
  // Phase 2: the shards summed over dp_replicate.
  Status allReduceReplicas(int g, uint8_t *grad, std::vector<RequestId> &requests);
  // Adds the group's reduced shards, averaged, to the shards' gradients.
  Status accumulate(int g, const uint8_t *grad);
  // Sums each gradient shard along the data-carrying dims it is Replicate on.
  Status sumAlongData();
  Status step(int64_t adamwStep);
  Status scaleGrads(float factor);
  Status zeroGrads();

private:
  const Context *ctx_ = nullptr;
  std::vector<ParamRt> *params_ = nullptr;
  std::vector<std::vector<int>> members_; // per hook group
  std::vector<int> all_;
};

} // namespace dmuon::rt

#endif
