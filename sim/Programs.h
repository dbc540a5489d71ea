// Lowering a plan to the simulator's programs: dmuon's own (per rank, from
// the plan's hook groups, segments, routes and per-rank figures) and the
// three baselines priced on the same model, mesh and cluster.
#ifndef DMUON_SIM_PROGRAMS_H
#define DMUON_SIM_PROGRAMS_H

#include "sim/Cluster.h"
#include "sim/Program.h"

#include "dmuon/plan_generated.h"
#include "plan/PlanView.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dmuon::sim {

// The plan's mesh (plan/PlanView.h) as the simulator needs it, with where
// nodes begin (ranks are row-major, a node holds
// devices_per_node consecutive ranks).
struct MeshView : PlanView {
  explicit MeshView(const plan::Plan &p) : PlanView(p) {}

  int64_t world = 1, devicesPerNode = 1;

  static MeshView of(const plan::Plan &p, int64_t devicesPerNode);
  int64_t nodes() const { return (world + devicesPerNode - 1) / devicesPerNode; }
  // Ranks of the group of `rank` that varies `dims` (every other coordinate
  // fixed), and whether it spans more than one node.
  int64_t groupSize(const std::vector<int> &dims) const;
  bool spansNodes(int64_t rank, const std::vector<int> &dims) const;
  // dp_shard, dp_replicate and the data-carrying dims: the ranks whose
  // gradients a data-parallel average meets.
  std::vector<int> dataParallelDims() const;
  std::vector<int> shardDims() const;
  std::vector<int> replicateDims() const;
};

// The mesh dims a segment's phase-2 reduce and replicate broadcast span:
// dp_replicate and the data-carrying dims its params are Replicate on
// (plan 1.4: Param.data_dims; before 1.4, dp_replicate alone). The one place
// to adapt when the plan records a segment's column otherwise.
std::vector<int> segmentColumnDims(const plan::Plan &p, const plan::Segment &seg,
                                   const MeshView &mesh);

// Forward and backward seconds per hook group from the cluster's workload
// (split by each group's share of this rank's param elements). A plan
// without hook groups gets one pseudo-group holding the whole compute.
struct ComputeSplit {
  std::vector<std::string> names;
  std::vector<double> forward, backward;
  double flopsPerToken = 0; // what the flops model used (0: seconds given)
};
ComputeSplit splitCompute(const plan::Plan &p, const Cluster &c);

// What every rank's program is built from, read once from the plan.
// Bytes and collective count of one kind of traffic.
struct Traffic {
  double bytes = 0;
  int64_t count = 0;
  void add(double b) {
    bytes += b;
    ++count;
  }
};

struct ColumnTraffic {
  std::vector<int> dims;
  Traffic reduce, replicate;
};

struct PlanDigest {
  struct Group {
    Traffic broadcast, reduce;                  // owner segments, over the shard group
    Traffic allGather, reduceScatter, shardSum; // sharded route
    double elements = 0, valueBytes = 0, muonElements = 0;
  };
  std::vector<Group> groups;
  // [shard coordinate][group]: the owner segments whose column this shard's
  // ranks are in.
  std::vector<std::vector<std::vector<ColumnTraffic>>> columns;
  double muonElements = 0, muonNsFlops = 0, elements = 0, valueBytes = 0;
  double ungroupedElements = 0; // replicated-route params: all-reduced at the step
  int64_t gatherSize = 1;       // comm params' gather group (model-parallel)
  int64_t stage = -1;           // the pipeline stage digested; -1: every param
};

// Whether `rank` (at `coord`) runs `q`'s NS: it is in the owner's slot
// (dp_shard, dp_replicate) and data group (the data-carrying dims `q` is
// Replicate on), and for a comm param the computing member of the gather
// group.
bool runsNs(const plan::Param &q, const MeshView &mesh, const std::vector<int64_t> &coord);

// SOAP's and Shampoo's refreshes (docs/optimizers.md, "Staggered
// refreshes"; sim/Refreshes.cpp). A plan's per-rank figures (ns_flops) and Param.cost carry each
// refresh amortized over its rule's frequency: the mean step. Every matrix
// refreshes at the steps s (counted from 0) with s mod frequency equal to its
// step phase: SOAP's refresh_phase (its updates count from step 1, after a
// step 0 that only gathers statistics), Shampoo's refresh_phase - 1 (its steps
// count from 1).
struct RefreshPeriod {
  int64_t soap = 0, shampoo = 0; // each rule's frequency; 0 where the plan refreshes none
  bool any() const { return soap > 0 || shampoo > 0; }
  int64_t steps() const; // the period of both: the least common multiple
};
RefreshPeriod refreshPeriod(const plan::Plan &p);

struct Refresh {
  bool soap = true;
  int64_t stepPhase = 0;
  double seconds = 0; // the refresh's flops at the device's NS rate
};
// The refreshes `rank` runs (the matrices it steps).
std::vector<Refresh> rankRefreshes(const plan::Plan &p, const MeshView &mesh, const Cluster &c,
                                   int64_t rank);
// Their seconds at step `step`, and per step on average.
double refreshSecondsAt(const std::vector<Refresh> &refreshes, const RefreshPeriod &period,
                        int64_t step);
double amortizedRefreshSeconds(const std::vector<Refresh> &refreshes, const RefreshPeriod &period);
// A step of the period at which `refreshes` cost most (of several such, the
// one pairing each rule's lowest costliest phase), and what they cost there.
std::pair<int64_t, double> worstRefreshStep(const std::vector<Refresh> &refreshes,
                                            const RefreshPeriod &period);

// With `stage` >= 0 (a plan with pipeline stages), only that stage's params
// and hook groups' segments: what its ranks move and step.
std::unique_ptr<PlanDigest> digestPlan(const plan::Plan &p, const MeshView &mesh,
                                       int64_t stage = -1);
// A program of stage `stage` of a plan with pipeline stages: only its hook
// groups, their compute that of the stage's whole step (all its
// micro-batches): each pipeline carries the tokens of its P stages' ranks,
// so the global batch (tokens_per_rank x ranks) is what a mesh without
// stages carries (docs/cluster-format.md, "Pipeline stages").
void restrictToStage(Program &prog, const plan::Plan &p, int64_t stage, int64_t stages);
// `rank`'s program at the mean step, or with `refreshStep` at that step of
// the refresh period: the refreshes due then in place of their mean share.
Program dmuonProgram(const plan::Plan &p, const PlanDigest &d, const MeshView &mesh,
                     const Cluster &c, const ComputeSplit &split, int64_t rank,
                     std::optional<int64_t> refreshStep = std::nullopt);

enum class Baseline {
  AdamW,           // FSDP2-style: all-gather / reduce-scatter every group, AdamW on shards
  NaiveAllReduce,  // DDP: all-reduce every gradient, NS on every matrix on every rank
  NaiveAllGather,  // ZeRO-1: reduce-scatter, all-gather the Muon gradients, NS everywhere
};
const char *baselineName(Baseline b);
Program baselineProgram(Baseline b, const plan::Plan &p, const PlanDigest &d,
                        const MeshView &mesh, const Cluster &c, const ComputeSplit &split);

} // namespace dmuon::sim

#endif
