// The planning passes of docs/dmuonc.md#pipeline, in pipeline order. Each does one job
// on the PlanModel, reports problems through Diagnostics and returns false if
// it reported an error.
#ifndef DMUON_COMPILER_PASSES_H
#define DMUON_COMPILER_PASSES_H

#include "support/Diagnostics.h"
#include "Model.h"
#include "common/ShardChunks.h"

#include <string>
#include <string_view>

namespace dmuon {

bool runSelect(PlanModel &model, Diagnostics &diags);
bool runValidate(PlanModel &model, Diagnostics &diags);
bool runGroup(PlanModel &model, Diagnostics &diags);
// A check after group: refuses placements the partition and the runtime do
// not support (passes/CheckPlacements.cpp). Changes nothing.
bool runCheckPlacements(PlanModel &model, Diagnostics &diags);
// Which pipeline stage holds each param (passes/PipelineStages.cpp); with
// no stage dim, checks that the manifest asks for none.
bool runPipelineStages(PlanModel &model, Diagnostics &diags);
bool runPartition(PlanModel &model, Diagnostics &diags);
// Part of partition: SOAP's and Shampoo's refresh phases (passes/Stagger.cpp).
void staggerRefreshes(PlanModel &model);
bool runHooks(PlanModel &model, Diagnostics &diags);
bool runLayout(PlanModel &model, Diagnostics &diags);
// An analysis of the laid-out plan: every rank's memory and per-step
// communication figures (passes/RankFigures.cpp). It completes the plan.
bool runRankFigures(PlanModel &model, Diagnostics &diags);

// The mesh dims that chunk `p`'s local shard (common/ShardChunks.h): its
// Shard / StridedShard placements on the model-parallel dims.
common::ShardLayout shardLayoutOf(const Param &p, const Mesh &mesh);
// Whether any such dim exists: without one the local shard is the whole
// shape, and most params need no layout built (three vectors each).
bool chunkedByModelParallelDims(const Param &p, const Mesh &mesh);
// Part of validate: the manifest's qk_clip pairs (passes/QkClip.cpp); resolves
// each pair's key param.
bool validateQkClip(PlanModel &model, Diagnostics &diags);
// Part of validate: the blocks each matrix is orthogonalized as, resolved
// and checked against its matrix view (passes/NsBlocks.cpp).
bool resolveMatrixBlocks(PlanModel &model, Diagnostics &diags);

// Whether mesh dim `meshDim` is a model-parallel dim whose Shard or
// StridedShard touches the param's matrix dims (for a flattened conv weight:
// any dim): the dims a comm param's NS gathers over (passes/Group.cpp).
bool shardsMatrixDims(const Param &p, const Mesh &mesh, int meshDim);

// The default layer key of a param: its lowest ancestor module ending in
// layers.N, blocks.N or h.N, else its parent module ("" for a root param).
// Always a prefix of the name: the view is into `paramName`.
std::string_view defaultLayerViewOf(std::string_view paramName);
std::string defaultLayerOf(const std::string &paramName);
// Every param's default layer, from the model's structure as well
// (passes/Blocks.cpp): today's rule where it applies, else the repeated
// blocks whatever their names. Sets Param::defaultLayerLen.
void assignDefaultLayers(PlanModel &model);
// The layer assignDefaultLayers gave `p` (defaultLayerViewOf(p.name) before
// it ran): a view into p.name.
std::string_view defaultLayerViewOf(const Param &p);

} // namespace dmuon

#endif
