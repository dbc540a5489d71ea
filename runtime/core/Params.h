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

// An owner's column: the ranks of its shard column that differ from this one
// on dp_replicate and on the data-carrying dims its params are Replicate on
// (the data group less dp_shard). `size` ranks, the owner at index `root`,
// this rank at `mine`.
struct OwnerColumn {
  Communicator group = Communicator::Replicate;
  int size = 1, root = 0, mine = 0;
};

// The owner route's part of a param on this rank.
struct OwnerPlace {
  int so = -1, ro = -1; // the owner slot
  // The ranks its phase-2 reduce and replicate broadcast span.
  OwnerColumn column;
  bool keepsMaster = false; // this rank is on the owner's shard column (I2)
  bool isOwner = false;     // this rank is the global owner: it steps the param
  DeviceArray reducedGrad;  // the averaged gradient, on the global owner until the step (I3)
};

// A Muon matrix sharded on a matrix dim over a model-parallel dim: the group
// that gathers it for NS, who in it computes, and how its chunks
// concatenate along the gathered tensor dim.
struct MatrixGather {
  bool active = false;
  Communicator group = Communicator::World;
  int size = 1, coord = 0, computeIndex = 0;
  // This rank's slice as [concatOuter, its rows, concatInner] around the
  // gathered tensor dim (the same outside it for the whole gather group),
  // and each gather coordinate's rows, which add up to the full dim.
  int64_t concatOuter = 1, concatInner = 1;
  std::vector<int64_t> chunks;
};

// The sharded route's part of a param on this rank: its flat shard of the
// local elements, `elements` long (values, moments and `grad` hold that
// many, padding included), from element `begin`, of which `real` are the
// param's own.
struct FlatShard {
  int64_t elements = 0, begin = 0, real = 0;
  DeviceArray grad;
};

// The data-carrying dims a replicated or sharded param is Replicate on: its
// averaged gradient is summed along them too (`size` ranks, 1: none).
struct AlongData {
  Communicator group = Communicator::World;
  int size = 1;
};

class ParamOptimizer;

// The blocks a matrix rule orthogonalizes apart (plan 1.9 block_sizes, of
// the matrix NS runs on: optim/MatrixBlocks.h).
struct MatrixBlockSplit {
  plan::BlockDim dim = plan::BlockDim::none;
  std::vector<int64_t> sizes; // along dim; empty: the whole matrix
  bool whole() const { return sizes.empty(); }
};

struct ParamRt {
  const dmuon::plan::Param *plan = nullptr;
  std::string name;
  plan::Route route = plan::Route::owner; // the effective one (common/Routes.h)
  bool muon = false; // Muon math; otherwise AdamW
  // The update rule of the rank that steps it, and the fp32 state that rank
  // keeps for it, one array per field of the rule (optim/Optimizer.h).
  ParamOptimizer *optimizer = nullptr;
  std::vector<DeviceArray> state;
  // Elements of the local shard every rank's state, buffers and collectives
  // hold: the largest model-parallel coordinate's (plan local_shape). This
  // rank's own slice (common/ShardChunks.h) is the first sliceNumel of them,
  // row-major; where a tensor dim does not divide evenly the rest is padding
  // and stays zero.
  int64_t numel = 0;
  int64_t sliceNumel = 0;
  int group = -1; // hook group (owner and sharded routes)
  // The local matrix view.
  int64_t localBatch = 1, localRows = 0, localCols = 0;
  int64_t sliceBatch = 1; // the matrices of this rank's own slice (numel: the largest's)
  kernels::NsForm nsForm = kernels::NsForm::ThreeGemm; // the plan's, for Muon params
  MatrixBlockSplit blocks;                             // the plan's, for Muon and NorMuon
  // SOAP and Shampoo: the sides of the matrix view they precondition (0: a
  // side left as it is); set with the param's rule (optim/Optimizers.h).
  int64_t leftDim = 0, rightDim = 0;
  int refreshPhase = 0; // the plan's refresh_phase: refreshes at steps = phase mod frequency
  MatrixGather gather;
  bool bound = false;
  // Whether this rank's copy of the (averaged) gradient counts in the global
  // norm: one rank per element over owners, replicas and model-parallel
  // copies (dmuon_runtime_grad_norm).
  bool countsInNorm = false;
  float lrScale = 1, weightDecayScale = 1; // dmuon_runtime_set_param_group_scale
  // fp32 values this rank keeps: the owner's shard column (owner route, I2),
  // this rank's shard (sharded), every rank (replicated).
  DeviceArray master;
  // Each route's part; only the param's own route's is set.
  OwnerPlace owner;
  FlatShard shard;
  AlongData along;

  // Elements of each array this rank keeps of it (values, state).
  int64_t heldElements() const { return route == plan::Route::sharded ? shard.elements : numel; }
  // Whether this rank applies its updates (and so keeps its optimizer state).
  bool stepsHere() const { return route != plan::Route::owner || owner.isOwner; }
  // Whether this rank keeps its fp32 values.
  bool keepsValues() const { return route != plan::Route::owner || owner.keepsMaster; }
};

// `base` with the param's group scales applied
// (dmuon_runtime_set_param_group_scale).
template <typename Hyper> Hyper withGroupScale(Hyper base, const ParamRt &p) {
  base.lr *= p.lrScale;
  base.weightDecay *= p.weightDecayScale;
  return base;
}

// One record per plan param, in plan order; creates the model-parallel
// gather communicators on the way (the same order on every rank).
// (Their update rules are the executor's to give: optim/Optimizer.h.)
Status buildParams(const LoadedPlan &plan, Topology &topo, Backend &backend,
                   std::vector<ParamRt> &out);

// Refuses what this runtime cannot execute, before anything is allocated.
Status checkExecutable(const LoadedPlan &plan);

} // namespace dmuon::rt

#endif
