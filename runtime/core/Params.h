// The runtime's record of each param: how it travels (its route), where its
// owner is, its local matrix view, and the fp32 state this rank keeps for it.
#ifndef DMUON_RUNTIME_CORE_PARAMS_H
#define DMUON_RUNTIME_CORE_PARAMS_H

#include "hal/Device.h"
#include "core/LoadedPlan.h"
#include "core/Topology.h"

#include <string>
#include <vector>

namespace dmuon::rt {

// How a param's values and gradients move between ranks.
enum class Route {
  Owner,      // owner broadcast / reduce to the owner / the owner steps
  Sharded,    // flat shards over dp_shard: all-gather / reduce-scatter; each rank its shard
  Replicated, // every rank holds it; gradients all-reduced; every rank steps
  Host,       // the host manages it; the runtime leaves it alone
};

// An owner's column: the ranks of its shard column that differ from this one
// on dp_replicate and on the data-carrying dims its params are Replicate on
// (the data group less dp_shard). `size` ranks, the owner at index `root`,
// this rank at `mine`.
struct OwnerColumn {
  Communicator group = Communicator::Replicate;
  int size = 1, root = 0, mine = 0;
};

struct ParamRt {
  const dmuon::plan::Param *plan = nullptr;
  std::string name;
  Route route = Route::Owner;
  bool muon = false; // Muon math; otherwise AdamW
  // Elements of the local shard every rank's state, buffers and collectives
  // hold: the largest model-parallel coordinate's (plan local_shape). This
  // rank's own slice (common/ShardChunks.h) is the first sliceNumel of them,
  // row-major; where a tensor dim does not divide evenly the rest is padding
  // and stays zero.
  int64_t numel = 0;
  int64_t sliceNumel = 0;
  int group = -1;    // hook group (owner and sharded routes)
  int so = -1, ro = -1; // owner slot (owner route)
  // The local matrix view; for a matrix sharded on a matrix dim over a
  // model-parallel dim, the group that gathers it for NS, who in it computes,
  // and how its chunks concatenate along the gathered tensor dim.
  int64_t localBatch = 1, localRows = 0, localCols = 0;
  int64_t sliceBatch = 1; // the matrices of this rank's own slice (numel: the largest's)
  bool comm = false;
  // Replicated and sharded routes: the data-carrying dims it is Replicate
  // on; its averaged gradient is summed along them too (alongData;
  // alongSize ranks, 1: none).
  Communicator alongData = Communicator::World;
  int alongSize = 1;
  // Owner route: the column its phase-2 reduce and replicate broadcast span.
  OwnerColumn column;
  Communicator gatherGroup = Communicator::World;
  int gatherSize = 1, gatherCoord = 0, computeIndex = 0;
  // This rank's slice as [concatOuter, its rows, concatInner] around the
  // gathered tensor dim (the same outside it for the whole gather group),
  // and each gather coordinate's rows, which add up to the full dim.
  int64_t concatOuter = 1, concatInner = 1;
  std::vector<int64_t> concatChunks;
  bool isOwner = false, keepsMaster = false, bound = false;
  // Whether this rank's copy of the (averaged) gradient counts in the global
  // norm: one rank per element over owners, replicas and model-parallel
  // copies (dmuon_runtime_grad_norm).
  bool countsInNorm = false;
  float lrScale = 1, weightDecayScale = 1; // dmuon_runtime_set_param_group_scale
  kernels::NsForm nsForm = kernels::NsForm::ThreeGemm; // the plan's, for Muon params
  // fp32 values this rank keeps (owner route: the owner's shard column, I2;
  // replicated: every rank) and optimizer state (on the rank that steps it).
  DeviceArray master, momentum, reducedGrad; // reducedGrad: owner route, I3
  DeviceArray adamM, adamV;
  size_t gradOffset = 0; // replicated: into the route's gradient buffer
  // Sharded: this rank's flat shard of the local elements: shardElements
  // (master, moments and gradShard hold that many, padding included), from
  // element shardBegin, of which shardReal are the param's own.
  int64_t shardElements = 0, shardBegin = 0, shardReal = 0;
  DeviceArray gradShard;
};

// `base` with the param's group scales applied
// (dmuon_runtime_set_param_group_scale).
template <typename Hyper> Hyper withGroupScale(Hyper base, const ParamRt &p) {
  base.lr *= p.lrScale;
  base.weightDecay *= p.weightDecayScale;
  return base;
}

// AdamW on the `n` values this rank keeps of the param (master and moments)
// with `grad`; every route's AdamW step.
inline Status adamwUpdate(Device &dev, ParamRt &p, const AdamWHyper &base, const float *grad,
                          int64_t n, int64_t step) {
  return dev.adamwStep(p.master.floats(), p.adamM.floats(), p.adamV.floats(), grad, n, step,
                       withGroupScale(base, p));
}

// One record per plan param, in plan order; creates the model-parallel
// gather communicators on the way (the same order on every rank).
Status buildParams(const LoadedPlan &plan, Topology &topo, Backend &backend,
                   std::vector<ParamRt> &out);

// Refuses what this runtime cannot execute, before anything is allocated.
Status checkExecutable(const LoadedPlan &plan);

} // namespace dmuon::rt

#endif
