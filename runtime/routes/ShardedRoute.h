// The sharded route (FSDP2's way with the large non-Muon params: embeddings,
// output heads): every dp_shard rank keeps one flat shard of the param, its
// AdamW moments and its gradient (ParamRt::shard). A hook group's unshard
// all-gathers the shards into the group's packed buffer; its reduce
// reduce-scatters the gradients back to the shards (phase 1, over dp_shard)
// and all-reduces the shards over dp_replicate (phase 2, HSDP). Each
// gradient shard is then summed along the data-carrying dims its param is
// Replicate on (their ranks saw other tokens).
#ifndef DMUON_RUNTIME_ROUTES_SHARDEDROUTE_H
#define DMUON_RUNTIME_ROUTES_SHARDEDROUTE_H

#include "routes/Route.h"

#include <vector>

namespace dmuon::rt {

class ShardedRoute final : public Route {
public:
  Status init(const Context &ctx, std::vector<ParamRt> &params);

  // This rank's shards of group g, cast to the param dtype into their place
  // in `packed`, then gathered from every shard.
  Status unshard(int g, uint8_t *packed, std::vector<RequestId> &requests) override;
  Status reduceShards(int g, uint8_t *grad, std::vector<RequestId> &requests) override;
  Status reduceReplicas(int g, uint8_t *grad, std::vector<RequestId> &requests) override;
  // Adds the group's reduced shards, averaged, to the shards' gradients.
  Status collect(int g, const uint8_t *grad) override;

  Status finishGradients() override;
  GradView averagedGrad(int index) override;
  // Its params are all AdamW: clipped under every policy that clips.
  Status scaleGrads(float factor, bool muonToo) override;
  Status zeroGrads() override;
  Status step(int64_t adamwStep) override;

private:
  const Context *ctx_ = nullptr;
  std::vector<ParamRt> *params_ = nullptr;
  std::vector<std::vector<int>> members_; // per hook group
  std::vector<int> all_;
};

} // namespace dmuon::rt

#endif
