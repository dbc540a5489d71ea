// The owner route: each param has one global owner that keeps its fp32
// master and optimizer state and alone steps it. Per hook group, each
// owner's params are packed into one segment of the group's buffer and
// broadcast over the shard group (unshard); gradients are reduced onto the
// owner in two phases (shard group, then down the owner's column:
// dp_replicate and the data-carrying dims the segment's params are
// Replicate on); after the step the owner's updated masters are broadcast
// down that column (publish: waited for at once, or by the next unshard
// with replicate_async).
#ifndef DMUON_RUNTIME_ROUTES_OWNERROUTE_H
#define DMUON_RUNTIME_ROUTES_OWNERROUTE_H

#include "routes/Route.h"

#include <vector>

namespace dmuon::rt {

class OwnerRoute final : public Route {
public:
  Status init(const Context &ctx, std::vector<ParamRt> &params);

  Status unshard(int g, uint8_t *packed, std::vector<RequestId> &requests) override;
  Status reduceShards(int g, uint8_t *grad, std::vector<RequestId> &requests) override;
  Status reduceReplicas(int g, uint8_t *grad, std::vector<RequestId> &requests) override;
  // Adds the averaged gradient to each global owner's reduced gradient (I3).
  Status collect(int g, const uint8_t *grad) override;
  Status waitPublished(int g) override;

  GradView averagedGrad(int index) override;
  Status scaleGrads(float factor, bool muonToo) override;
  Status zeroGrads() override;
  // Each param this rank owns, in plan order, by its rule; then its reduced
  // gradient is dropped (I3).
  Status step(int64_t adamwStep) override;
  Status publish() override;

private:
  struct Segment {
    int so = 0;
    bool owner = false; // this rank is its global owner
    // Its params' column: the phase-2 reduce and the replicate broadcast.
    OwnerColumn column;
    int64_t offset = 0, bytes = 0, reduceOffset = 0, reduceBytes = 0;
    int64_t masterElements = 0;
    std::vector<int> params;
  };
  struct PendingReplicate {
    int segment;
    DeviceArray staging;
    RequestId request;
  };

  Status pack(const Segment &seg, uint8_t *dst);
  Status reduceSegment(uint8_t *grad, const Segment &seg, Communicator comm, int root, int mine,
                       int size, std::vector<RequestId> &requests);

  const Context *ctx_ = nullptr;
  std::vector<ParamRt> *params_ = nullptr;
  std::vector<std::vector<Segment>> segments_;        // per hook group
  std::vector<std::vector<PendingReplicate>> replicate_; // per hook group
  std::vector<int> owned_; // the params this rank steps, in plan order
};

} // namespace dmuon::rt

#endif
