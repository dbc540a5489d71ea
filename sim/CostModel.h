// The alpha-beta cost of collectives (docs/cluster-format.md, "Cost
// model"): ring algorithms for all-reduce, all-gather and reduce-scatter,
// pipelined trees for broadcast and reduce, with NCCL-tests' bus bandwidth.
#ifndef DMUON_SIM_COSTMODEL_H
#define DMUON_SIM_COSTMODEL_H

#include "sim/Cluster.h"
#include "sim/Program.h"

#include <optional>
#include <vector>

namespace dmuon::sim {

// Latency steps of one collective of `n` ranks: 2(n-1) for all-reduce, n-1
// for all-gather and reduce-scatter, ceil(log2 n) for broadcast and reduce.
double latencySteps(CollKind kind, int64_t n);
// The bytes each rank's link carries per byte of buffer, NCCL-tests'
// bus-bandwidth factor: 2(n-1)/n all-reduce, (n-1)/n all-gather and
// reduce-scatter, 1 broadcast and reduce.
double busFactor(CollKind kind, int64_t n);
// Seconds of one collective; 0 for a group of one rank.
double transferSeconds(const Cluster &c, const Transfer &t);
// Seconds of a coalesced group: the bandwidth terms add up (the collectives
// share the links); the latency is the largest one when the cluster
// coalesces (NCCL group calls), else the sum.
double opSeconds(const Cluster &c, const CommOp &op);

// One measured collective for the calibration: `bytes` of buffer (as
// Transfer::bytes counts it) took `seconds`.
struct CollSample {
  double bytes = 0, seconds = 0;
};
// The link cost whose transferSeconds best fits `samples` of one kind on
// `n` ranks: t = steps(n) alpha + factor(n) B / bw, by least squares on the
// relative error (small and large buffers weigh alike). A negative
// intercept is clamped to zero latency. nullopt when the samples do not
// determine a positive bandwidth (fewer than two sizes, or times that do
// not grow with the size) or n < 2.
std::optional<LinkCost> fitLinkCost(CollKind kind, int64_t n,
                                    const std::vector<CollSample> &samples);

} // namespace dmuon::sim

#endif
