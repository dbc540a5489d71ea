// The compiler's in-memory state: what the frontends produce and each pass
// fills in. One PlanModel flows through the whole pipeline.
#ifndef DMUON_COMPILER_MODEL_H
#define DMUON_COMPILER_MODEL_H

#include "Mesh.h"
#include "Placement.h"

#include "dmuon/plan_generated.h"

#include "llvm/Support/SMLoc.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dmuon {

// The most params a model may have, from any frontend. Measured at this
// limit (2,000,000 matrices, mesh 2x4): 3.5 s, 1.9 GB peak, a 424 MB plan;
// ten times that passes the plan format's 2 GiB after tens of GB of work.
inline constexpr int64_t kMaxModelParams = 2'000'000;

// The plan's enums (include/dmuon/plan.fbs), used as they are: what the
// passes compute is what the plan writer stores, value for value.
using DType = plan::DType;
using Role = plan::Role;
using MatrixOptimizer = plan::MatrixOptimizer;
using RoleReason = plan::RoleReason;
using ShardingGroupKind = plan::ShardingGroupKind;
using Stage = plan::Stage;
using Mode = plan::Mode;
using CostModel = plan::CostModel;
using Route = plan::Route;
using RoutePolicy = plan::RoutePolicy;
using RouteReason = plan::RouteReason;

// "f32", "float32", "fp32", "float", "bf16", ...: the spellings manifests and
// ONNX use.
std::optional<DType> parseDType(std::string_view name);
// The pass a stage is captured after: "frontend", "select", ... "complete".
const char *stageName(Stage s);
std::optional<Stage> parseStage(std::string_view name);

// The matrix Muon sees in a shape: batch x rows x cols over the last two dims,
// or [out, in*k...] for a conv weight.
struct MatrixView {
  int64_t batch = 1, rows = 0, cols = 0;
};
MatrixView matrixViewOf(const std::vector<int64_t> &shape, bool conv);
// "[32,64]", as diagnostics print shapes.
std::string shapeString(const std::vector<int64_t> &shape);

// A name the input did not give (an ONNX initializer named by the exporter,
// "onnx::MatMul_7") recovered from the node that uses it: the input's own
// name and how it was recovered. Rare in a model, so held apart from Param.
struct RecoveredName {
  std::string sourceName;
  std::string note;
};

// What a manifest's `optimizer` names: the role, and for a matrix the rule
// its owner runs ("muon", "normuon"; "adamw" is the role alone).
struct OptimizerChoice {
  Role role = Role::muon;
  MatrixOptimizer matrix = MatrixOptimizer::muon;
};

// The blocks a matrix is orthogonalized as (plan.fbs Param.block_sizes):
// `sizes` along `dim` of every batch slice of the matrix view, or, as a
// manifest or flag gives them before validate, `count` equal blocks.
struct MatrixBlocks {
  plan::BlockDim dim = plan::BlockDim::none;
  std::vector<int64_t> sizes;
  int64_t count = 0;
  plan::BlockSource source = plan::BlockSource::none;
  llvm::SMLoc loc; // the manifest key that gave them, for diagnostics
};

struct Param {
  // Frontend.
  std::string name;
  std::shared_ptr<const RecoveredName> recovered; // null: the name is the input's
  std::string sourceLoc;  // "file:line:col" for the plan, empty if none
  llvm::SMLoc loc;        // for diagnostics into a manifest buffer
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  std::vector<Placement> placements; // one per mesh dim
  bool conv = false;                 // flatten [out, in, k...] to [out, in*k...]
  std::optional<OptimizerChoice> optimizerOverride; // per-param optimizer in the manifest
  std::optional<Route> routeOverride; // per-param route in the manifest
  bool routeOverrideInherited = false; // from a repeat block: Muon params ignore it
  // `stage = k` in the manifest (-1: none given), and where it was written.
  int manifestStage = -1;
  llvm::SMLoc stageLoc;
  // Rare: shared, as a million params of a flat manifest mostly have none.
  // From validate on, sizes resolved (passes/NsBlocks.cpp); null: one block.
  std::shared_ptr<const MatrixBlocks> blocks;

  // select
  Role role = Role::adamw;
  RoleReason roleReason = RoleReason::default_vector;
  MatrixOptimizer matrixOptimizer = MatrixOptimizer::muon; // role muon: the update rule
  int64_t batch = 1, rows = 0, cols = 0; // the matrix view
  Route route = Route::replicated; // select's; the writer writes owner for Muon params
  RouteReason routeReason = RouteReason::policy;
  // validate: the local shard every rank holds, padded to the largest (the
  // shape chunked by the non-ownership mesh dims that shard it, as DTensor
  // does: common/ShardChunks.h) and its matrix view.
  std::vector<int64_t> localShape;
  int64_t localBatch = 1, localRows = 0, localCols = 0;
  // group
  ShardingGroupKind group = ShardingGroupKind::none;
  int commGroup = -1;
  // The data-carrying mesh dims this param is Replicate on: its gradient is
  // averaged over them as over the ownership dims.
  std::vector<int> dataDims;
  // comm params: the one non-ownership mesh dim that shards the matrix dims
  // (gathered for NS) and the tensor dim it shards; -1 otherwise.
  int gatherMeshDim = -1, gatherTensorDim = -1;
  // partition
  // The length of the name's prefix that is its default layer
  // (passes/Blocks.cpp, assignDefaultLayers); -1 before it ran.
  int64_t defaultLayerLen = -1;
  std::string layer;
  // The dense id of defaultLayerOf(name) among the moved params' layers,
  // for owner- and sharded-route params (-1 for others): the hook pass
  // groups by it without a table of names.
  int layerId = -1;
  int unit = -1;
  double cost = 0; // NS flops of the form that runs on it (SOAP, Shampoo: their own)
  int refreshPhase = 0; // SOAP, Shampoo: passes/Stagger.cpp
  plan::NsForm nsForm = plan::NsForm::three_gemm;
  // pipeline-stages: the stage that holds it (0 without a stage dim)
  int pipelineStage = 0;
  // hooks
  int hookGroup = -1;
  // layout
  int64_t offset = -1, bytes = 0, reduceOffset = -1, reduceBytes = 0;
  int computeIndex = -1; // comm params: coordinate along gatherMeshDim that runs NS
  // sharded route: local elements per dp_shard rank, and where this rank's
  // reduce-scatter result lies in the hook group's reduce buffer.
  int64_t shardElements = 0, shardOffset = -1;

  int64_t numElements() const;
  int64_t localNumElements() const;
};

struct Unit {
  std::string name;
  std::string layer;
  std::vector<int> params;
  double cost = 0;
  int slot = -1; // within its pipeline stage's slots
  int pipelineStage = 0;
  // The owner's data index (Mesh::dataIndexOf): its coordinates on the
  // data-carrying dims its params are Replicate on, 0 on the others.
  int64_t dataIndex = 0;
};

struct CommGroup {
  std::string key;
  std::vector<int> params;
  std::vector<int> shardDims;
  // Its replicate groups are a formula of these dims and the mesh
  // (common/ReplicateGroups.h); the plan stores the dims alone (1.5).
  std::vector<int> replicateMeshDims;
};

struct Segment {
  int slot = -1;
  int64_t ownerRank = -1;
  int64_t offset = 0, bytes = 0, reduceOffset = 0, reduceBytes = 0;
  std::vector<int> params;
  int64_t dataIndex = 0; // the owner's (Unit::dataIndex)
};

struct HookGroup {
  std::string name;
  std::vector<int> params;
  std::vector<Segment> segments;
  int64_t bufferBytes = 0, reduceBufferBytes = 0;
  int pipelineStage = 0; // of every param of the group
};

// One pipeline stage's share of the model and its own partition (plan.fbs
// PipelineStageStats).
struct PipelineStageStats {
  int stage = 0;
  int params = 0;
  int firstHookGroup = -1, hookGroups = 0;
  int64_t paramElements = 0;
  double totalCost = 0, lowerBound = 0, maxLoad = 0, imbalance = 0;
};

struct RankFigures {
  int64_t rank = 0;
  int ownedParams = 0;
  int64_t ownedElements = 0, masterBytes = 0, momentumBytes = 0;
  int64_t peakBufferBytes = 0;
  double nsFlops = 0;
  int64_t broadcastSend = 0, broadcastRecv = 0, reduceSend = 0, reduceRecv = 0;
  int64_t replicateSend = 0, replicateRecv = 0, allreduceBytes = 0;
  int64_t gatherSend = 0, gatherRecv = 0, scatterSend = 0, scatterRecv = 0;
  int64_t dataAllreduceBytes = 0;
  int64_t allgatherSend = 0, allgatherRecv = 0, reduceScatterSend = 0, reduceScatterRecv = 0;
  int64_t valueBytes = 0, adamMomentBytes = 0, gradBytes = 0, memoryBytes = 0;

  bool operator==(const RankFigures &) const = default;
};

// Whether two rows hold the same figures, their ranks aside.
inline bool sameFigures(const RankFigures &a, const RankFigures &b) {
  RankFigures x = a;
  x.rank = b.rank;
  return x == b;
}

struct Stats {
  std::vector<double> slotLoad;
  double totalCost = 0, lowerBound = 0, maxLoad = 0, imbalance = 0;
  double lptMaxLoad = 0;
  int refinementMoves = 0;
  int layerRuleViolations = 0;
  std::string lowerBoundKind;     // which argument gave lowerBound
  double simpleLowerBound = 0;    // max(total / S, largest param)
  bool optimal = false;           // maxLoad meets lowerBound
  int maxOwnersPerHookGroup = 0;  // (layout)
  double smallUnitCap = 0;        // 0: one merged small unit per layer
  // (rank-figures) Runs of consecutive ranks with equal figures: a row's
  // rank is its run's first, the run lasts to the next row's rank (the last
  // to the world size). The writer merges adjacent equal rows.
  std::vector<RankFigures> ranks;
  // One row per stage with a stage dim (none without): slotLoad then holds
  // stage 0's fine slots, then stage 1's, ...; the figures above are the
  // worst stage's (maxLoad, imbalance) or the sums (totalCost).
  std::vector<PipelineStageStats> pipelineStages;
};

struct OptimizerDefaults {
  // The real-valued hyper-parameters (common/HyperParams.def).
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help) double camel = def;
#define DMUON_HYPER_FIXED DMUON_HYPER_SCHEDULED
#include "common/HyperParams.def"
  bool nesterov = true;
  int nsSteps = 5;
  bool polarExpress = false;
  bool matchRmsAdamW = false;
  // SOAP's and Shampoo's integer settings (plan.fbs OptimizerDefaults 1.8).
  int soapPreconditionFrequency = 10;
  int64_t soapMaxPrecondDim = 10000;
  int shampooPreconditionFrequency = 100;
  int64_t shampooMaxPreconditionerDim = 8192;
  bool staggerRefreshes = true; // --stagger-refreshes
};

struct Options {
  Mode mode = Mode::z3;
  bool replicateAsync = true;
  int64_t smallParamThreshold = 5'000'000;
  std::string hookBoundary; // empty: default heuristic
  // --pipeline-split: the layers of each stage ("layers.0-15,layers.16-31");
  // empty: balanced by param elements (passes/PipelineStages.cpp).
  std::string pipelineSplit;
  std::string muonInclude, muonExclude;
  int alignment = 256;
  OptimizerDefaults optimizer;
  CostModel costModel = CostModel::flops;
  std::string costTablePath; // --cost-table, as given
  // Measured NS seconds per (rows, cols), loaded from costTablePath.
  std::map<std::pair<int64_t, int64_t>, double> costTable;
  double qkClipTau = 100.0; // --qk-clip-tau
  RoutePolicy routePolicy = RoutePolicy::by_size; // --adamw-route
  int64_t shardedThreshold = 500'000;              // --sharded-threshold
  // --strict-names: an ONNX initializer without its torch name is an error
  // (the frontend's; not recorded in the plan).
  bool strictNames = false;
  // --matrix-optimizer: the rule of every matrix a manifest does not name
  // one for (recorded per param).
  MatrixOptimizer matrixOptimizer = MatrixOptimizer::muon;
  // --ns-split: matrices whose names match `pattern` are orthogonalized as
  // blocks (passes/NsBlocks.cpp); --split-in-proj: a fused attention
  // in_proj_weight [3E, E] as its Q, K and V.
  struct BlockRule {
    std::string text; // the flag's value, for diagnostics
    std::string pattern;
    MatrixBlocks blocks;
  };
  std::vector<BlockRule> blockRules;
  bool splitInProj = true;
};

// A query/key pair for QK-Clip (docs/manifest-format.md, `qk_clip`): the
// frontend records it on the query param with the key's name; validate
// resolves the key and checks both (passes/QkClip.cpp).
struct QkClipPair {
  int query = -1, key = -1; // param indices (key: from validate on)
  std::string keyName;
  int64_t heads = 0, keyHeads = 0, headDim = 0;
  llvm::SMLoc loc;    // the qk_clip value
  llvm::SMLoc keyLoc; // its `key`
};

// A tensor of the input that is not a parameter (plan.fbs Buffer).
struct ModelBuffer {
  std::string name;
  std::vector<int64_t> shape;
  std::string reason;
};

struct PlanModel {
  std::string source;    // input path as given
  std::string modelName; // from the manifest, or the ONNX graph name
  Mesh mesh;
  Options options;
  std::vector<Param> params; // model (forward) order
  std::vector<Unit> units;
  std::vector<int> noComm;
  std::vector<CommGroup> commGroups;
  std::vector<HookGroup> hookGroups;
  Stats stats;
  std::vector<QkClipPair> qkClip; // in the query params' model order
  std::vector<ModelBuffer> buffers; // in the input's order
  Stage stage = Stage::frontend;
};

} // namespace dmuon

#endif
