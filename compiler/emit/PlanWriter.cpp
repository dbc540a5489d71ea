// PlanModel -> FlatBuffers plan (include/dmuon/plan.fbs).
//
// Determinism: everything is built in a fixed order from vectors in model
// order (no hash-map iteration) and the builder starts from a fixed initial
// size, so the same model always gives the same bytes.
//
// Size: a FlatBuffers offset may be shared, so equal shapes and placement
// lists are written once and referenced from every param that holds them, a
// layer string once per run of params in it, and a unit's name and layer
// are its param's when equal; a reader sees the same fields. The first
// occurrence in build order is the one written, so sharing keeps the output
// deterministic. (Hashing every name instead cost more time than the bytes
// it saved: names are unique.)
#include "PlanWriter.h"

#include "common/ParamNames.h"

#include "dmuon/plan_generated.h"
#include "dmuon/plan_version.h"
#include "plan/PlanFile.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

namespace dmuon {

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;
using flatbuffers::String;

bool samePlacements(const std::vector<Placement> &a, const std::vector<Placement> &b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const Placement &x, const Placement &y) {
                      return x.kind == y.kind && x.dim == y.dim && x.splitFactor == y.splitFactor &&
                             x.reduceOp == y.reduceOp;
                    });
}

class Writer {
public:
  // The initial size is a function of the model only (so output stays
  // deterministic) and large enough that a big plan is not copied on every
  // doubling of the builder's buffer.
  explicit Writer(const PlanModel &m)
      : m_(m),
        b_(64 * 1024 + 560 * m.params.size() + 64 * m.units.size() + 160 * m.stats.ranks.size()) {}

  PlanBuffer run();

private:
  // A string field that is absent when empty.
  Offset<String> optString(const std::string &s) {
    return s.empty() ? Offset<String>() : b_.CreateString(s);
  }
  // A string written once per distinct value. The keys view the model's
  // strings, which outlive the writer.
  Offset<String> sharedString(const std::string &s) {
    auto [it, inserted] = strings_.try_emplace(std::string_view(s));
    if (inserted)
      it->second = b_.CreateString(s);
    return it->second;
  }
  // `pool` keeps shapes and local shapes apart, so each field's vectors are
  // shared only among the same field of other params.
  using LongsPool = std::unordered_map<std::string_view, Offset<flatbuffers::Vector<int64_t>>>;
  Offset<flatbuffers::Vector<int64_t>> sharedLongs(LongsPool &pool, const std::vector<int64_t> &v) {
    std::string_view key(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(int64_t));
    auto [it, inserted] = pool.try_emplace(key);
    if (inserted)
      it->second = b_.CreateVector(v);
    return it->second;
  }
  // An int32 vector of the model's ints, written straight from them: no
  // copy per param, unit, group and segment.
  Offset<flatbuffers::Vector<int32_t>> intVector(const std::vector<int> &v) {
    static_assert(std::is_same_v<int, int32_t>, "model indices are written as int32");
    return b_.CreateVector(v);
  }
  Offset<flatbuffers::Vector<Offset<plan::Placement>>>
  sharedPlacements(const std::vector<Placement> &pls);
  bool reached(Stage s) const { return m_.stage >= s; }
  int64_t numShards() const { return m_.mesh.numShards(); }
  // Owner coordinates of a slot index (slot = replicate * G + shard) and a
  // data index.
  void slotCoords(int slot, int64_t dataIndex, int stage, int32_t &shard, int32_t &replicate,
                  int32_t &rank) const {
    shard = replicate = rank = -1;
    int64_t g = numShards();
    if (slot < 0 || g <= 0 || slot >= m_.mesh.numSlots())
      return;
    shard = static_cast<int32_t>(slot % g);
    replicate = static_cast<int32_t>(slot / g);
    rank = static_cast<int32_t>(m_.mesh.ownerRank(shard, replicate, dataIndex, stage));
  }

  Offset<plan::Mesh> writeMesh();
  Offset<plan::Options> writeOptions();
  Offset<plan::Param> writeParam(const Param &p);
  Offset<plan::Unit> writeUnit(const Unit &u);
  Offset<plan::CommGroup> writeCommGroup(const CommGroup &g);
  Offset<plan::HookGroup> writeHookGroup(const HookGroup &h);
  Offset<plan::Stats> writeStats();

  const PlanModel &m_;
  FlatBufferBuilder b_;
  std::unordered_map<std::string_view, Offset<String>> strings_;
  LongsPool shapes_, localShapes_;
  std::vector<Offset<String>> paramNames_, paramLayers_; // by param index
  const std::vector<Placement> *prevPlacements_ = nullptr;
  Offset<flatbuffers::Vector<Offset<plan::Placement>>> prevPlacementsOffset_;
  const std::string *prevLayer_ = nullptr;
  Offset<String> prevLayerOffset_;
  std::unordered_map<std::string, Offset<flatbuffers::Vector<Offset<plan::Placement>>>>
      placementLists_;
};

Offset<flatbuffers::Vector<Offset<plan::Placement>>>
Writer::sharedPlacements(const std::vector<Placement> &pls) {
  std::string key;
  for (const Placement &pl : pls) {
    std::string one = pl.str(); // every field written below, spelled
    key += std::to_string(one.size());
    key += ':';
    key += one;
  }
  auto [it, inserted] = placementLists_.try_emplace(std::move(key));
  if (!inserted)
    return it->second;
  std::vector<Offset<plan::Placement>> offsets;
  for (const Placement &pl : pls) {
    Offset<String> op;
    if (pl.kind == PlacementKind::partial)
      op = sharedString(pl.reduceOp);
    offsets.push_back(
        plan::CreatePlacement(b_, pl.kind, pl.isShard() ? pl.dim : 0,
                              pl.kind == PlacementKind::strided_shard ? pl.splitFactor : 0, op));
  }
  it->second = b_.CreateVector(offsets);
  return it->second;
}

Offset<plan::Mesh> Writer::writeMesh() {
  std::vector<Offset<plan::MeshDim>> dims;
  for (const MeshDim &d : m_.mesh.dims)
    dims.push_back(plan::CreateMeshDim(b_, b_.CreateString(d.name), static_cast<int32_t>(d.size),
                                       d.carriesData, d.isStage));
  auto dimsVec = b_.CreateVector(dims);
  plan::MeshBuilder mb(b_);
  mb.add_dims(dimsVec);
  mb.add_world_size(static_cast<int32_t>(m_.mesh.worldSize()));
  mb.add_shard_dim(m_.mesh.shardDim);
  mb.add_replicate_dim(m_.mesh.replicateDim);
  mb.add_num_shards(static_cast<int32_t>(m_.mesh.numShards()));
  mb.add_num_replicas(static_cast<int32_t>(m_.mesh.numReplicas()));
  mb.add_data_parallel_size(m_.mesh.dataParallelSize());
  mb.add_stage_dim(m_.mesh.stageDim);
  mb.add_num_stages(static_cast<int32_t>(m_.mesh.numStages()));
  return mb.Finish();
}

Offset<plan::Options> Writer::writeOptions() {
  const Options &o = m_.options;
  const OptimizerDefaults &od = o.optimizer;
  auto opt = plan::CreateOptimizerDefaults(
      b_, od.lr, od.momentum, od.nesterov, od.weightDecay, od.nsSteps,
      od.polarExpress ? plan::NsCoefficients::polar_express : plan::NsCoefficients::original,
      od.matchRmsAdamW ? plan::LrScale::match_rms_adamw : plan::LrScale::original, od.adamwLr,
      od.adamwBeta1, od.adamwBeta2, od.adamwEps, od.adamwWeightDecay, od.normuonBeta2, od.soapLr,
      od.soapBeta1, od.soapBeta2, od.soapShampooBeta, od.soapEps, od.soapWeightDecay,
      od.soapPreconditionFrequency, static_cast<int32_t>(od.soapMaxPrecondDim), od.shampooLr,
      od.shampooBeta1, od.shampooBeta2, od.shampooEps, od.shampooWeightDecay, od.shampooGraftEps,
      od.shampooPreconditionFrequency, static_cast<int32_t>(od.shampooMaxPreconditionerDim));
  // As given on the command line; the plan's strings are text (escapedText).
  auto hook = optString(common::escapedText(o.hookBoundary));
  auto inc = optString(common::escapedText(o.muonInclude));
  auto exc = optString(common::escapedText(o.muonExclude));
  auto table = optString(common::escapedText(o.costTablePath));
  return plan::CreateOptions(b_, o.mode, o.replicateAsync, o.smallParamThreshold, hook, inc, exc,
                             o.alignment, opt, o.costModel, table, o.qkClipTau, o.routePolicy,
                             o.shardedThreshold);
}

Offset<plan::Param> Writer::writeParam(const Param &p) {
  auto name = b_.CreateString(p.name);
  paramNames_.push_back(name);
  const bool recovered = p.recovered != nullptr;
  auto sourceName = recovered ? optString(p.recovered->sourceName) : Offset<String>();
  auto nameNote = recovered ? optString(p.recovered->note) : Offset<String>();
  auto sourceLoc = optString(common::escapedText(p.sourceLoc));
  auto shape = sharedLongs(shapes_, p.shape);
  auto placements = prevPlacements_ && samePlacements(*prevPlacements_, p.placements)
                        ? prevPlacementsOffset_
                        : sharedPlacements(p.placements);
  prevPlacements_ = &p.placements;
  prevPlacementsOffset_ = placements;
  auto localShape = reached(Stage::validate) ? sharedLongs(localShapes_, p.localShape)
                                             : Offset<flatbuffers::Vector<int64_t>>();
  Offset<String> layer;
  if (reached(Stage::partition) && !p.layer.empty()) {
    layer = prevLayer_ && *prevLayer_ == p.layer ? prevLayerOffset_ : b_.CreateString(p.layer);
    prevLayer_ = &p.layer;
    prevLayerOffset_ = layer;
  }
  paramLayers_.push_back(layer);

  int32_t ownerShard = -1, ownerReplicate = -1, ownerRank = -1;
  int64_t ownerData = 0;
  if (reached(Stage::partition) && p.unit >= 0 && p.unit < static_cast<int>(m_.units.size())) {
    ownerData = m_.units[p.unit].dataIndex;
    slotCoords(m_.units[p.unit].slot, ownerData, m_.units[p.unit].pipelineStage, ownerShard,
               ownerReplicate, ownerRank);
  }
  auto dataDims = reached(Stage::group) && !p.dataDims.empty()
                      ? intVector(p.dataDims)
                      : Offset<flatbuffers::Vector<int32_t>>();

  const bool blocked = reached(Stage::validate) && p.blocks;
  auto blockSizes =
      blocked ? b_.CreateVector(p.blocks->sizes) : Offset<flatbuffers::Vector<int64_t>>();

  plan::ParamBuilder pb(b_);
  pb.add_name(name);
  pb.add_source_name(sourceName);
  pb.add_name_origin(recovered ? plan::NameOrigin::recovered_from_node
                               : plan::NameOrigin::as_declared);
  pb.add_name_note(nameNote);
  pb.add_source_loc(sourceLoc);
  pb.add_shape(shape);
  pb.add_dtype(p.dtype);
  pb.add_conv(p.conv);
  pb.add_placements(placements);
  if (reached(Stage::select)) {
    pb.add_role(p.role);
    pb.add_role_reason(p.roleReason);
    pb.add_route(p.role == Role::muon ? Route::owner : p.route);
    pb.add_route_reason(p.routeReason);
    if (p.role == Role::muon)
      pb.add_matrix_optimizer(p.matrixOptimizer);
    if (p.refreshPhase != 0)
      pb.add_refresh_phase(p.refreshPhase);
    pb.add_pipeline_stage(p.pipelineStage);
    pb.add_batch(p.batch);
    pb.add_rows(p.rows);
    pb.add_cols(p.cols);
  }
  if (reached(Stage::validate)) {
    pb.add_local_shape(localShape);
    pb.add_local_batch(p.localBatch);
    pb.add_local_rows(p.localRows);
    pb.add_local_cols(p.localCols);
    if (blocked) { // 1.9
      pb.add_block_dim(p.blocks->dim);
      pb.add_block_sizes(blockSizes);
      pb.add_block_source(p.blocks->source);
    }
  }
  if (reached(Stage::group)) {
    pb.add_group(p.group);
    pb.add_comm_group(p.commGroup);
    pb.add_gather_mesh_dim(p.gatherMeshDim);
    pb.add_gather_tensor_dim(p.gatherTensorDim);
    pb.add_data_dims(dataDims);
  }
  if (reached(Stage::partition)) {
    pb.add_layer(layer);
    pb.add_unit(p.unit);
    pb.add_owner_shard(ownerShard);
    pb.add_owner_replicate(ownerReplicate);
    pb.add_owner_rank(ownerRank);
    pb.add_owner_data_index(static_cast<int32_t>(ownerData));
    pb.add_cost(p.cost);
    pb.add_ns_form(p.nsForm);
  }
  if (reached(Stage::hooks))
    pb.add_hook_group(p.hookGroup);
  if (reached(Stage::layout)) {
    pb.add_offset(p.offset);
    pb.add_bytes(p.bytes);
    pb.add_reduce_offset(p.reduceOffset);
    pb.add_reduce_bytes(p.reduceBytes);
    pb.add_compute_index(p.computeIndex);
    pb.add_shard_elements(p.shardElements);
    pb.add_shard_offset(p.shardOffset);
  }
  return pb.Finish();
}

Offset<plan::Unit> Writer::writeUnit(const Unit &u) {
  // A unit of one param is usually named after it, and in its layer.
  const int first = u.params.empty() ? -1 : u.params.front();
  const bool own = first >= 0 && first < static_cast<int>(paramNames_.size());
  auto name = own && u.params.size() == 1 && m_.params[first].name == u.name
                  ? paramNames_[first]
                  : b_.CreateString(u.name);
  auto layer = own && !paramLayers_[first].IsNull() && m_.params[first].layer == u.layer
                   ? paramLayers_[first]
                   : b_.CreateString(u.layer);
  auto params = intVector(u.params);
  return plan::CreateUnit(b_, name, layer, params, u.cost, u.slot,
                          static_cast<int32_t>(u.dataIndex));
}

Offset<plan::CommGroup> Writer::writeCommGroup(const CommGroup &g) {
  auto key = b_.CreateString(g.key);
  auto params = intVector(g.params);
  auto shardDims = intVector(g.shardDims);
  auto repDims = intVector(g.replicateMeshDims);
  // No replicate_groups (1.5): a reader derives them from repDims and the
  // mesh; listing them cost O(world size) per group in the plan.
  return plan::CreateCommGroup(b_, key, params, shardDims, repDims);
}

Offset<plan::HookGroup> Writer::writeHookGroup(const HookGroup &h) {
  auto name = b_.CreateString(h.name);
  auto params = intVector(h.params);
  std::vector<Offset<plan::Segment>> segs;
  if (reached(Stage::layout)) {
    for (const Segment &s : h.segments) {
      int32_t shard, replicate, rank;
      slotCoords(s.slot, s.dataIndex, h.pipelineStage, shard, replicate, rank);
      if (s.ownerRank >= 0)
        rank = static_cast<int32_t>(s.ownerRank);
      auto segParams = intVector(s.params);
      segs.push_back(plan::CreateSegment(b_, rank, shard, replicate, s.offset, s.bytes,
                                         s.reduceOffset, s.reduceBytes, segParams,
                                         static_cast<int32_t>(s.dataIndex)));
    }
  }
  auto segVec = b_.CreateVector(segs);
  bool laidOut = reached(Stage::layout);
  return plan::CreateHookGroup(b_, name, params, segVec, laidOut ? h.bufferBytes : 0,
                               laidOut ? h.reduceBufferBytes : 0, h.pipelineStage);
}

Offset<plan::Stats> Writer::writeStats() {
  const Stats &s = m_.stats;
  int32_t muon = 0, adamw = 0;
  int64_t muonElems = 0, adamwElems = 0;
  if (reached(Stage::select)) {
    for (const Param &p : m_.params) {
      if (p.role == Role::muon) {
        ++muon;
        muonElems += p.numElements();
      } else {
        ++adamw;
        adamwElems += p.numElements();
      }
    }
  }
  bool partitioned = reached(Stage::partition);
  // Format 1.6: slot loads as runs of equal loads.
  std::vector<int32_t> runLengths;
  std::vector<double> runValues;
  if (partitioned)
    for (double load : s.slotLoad) {
      if (!runValues.empty() && runValues.back() == load) {
        ++runLengths.back();
        continue;
      }
      runLengths.push_back(1);
      runValues.push_back(load);
    }
  auto runLengthsVec = b_.CreateVector(runLengths);
  auto runValuesVec = b_.CreateVector(runValues);
  // Format 1.6: rank_runs, maximal runs of equal figures.
  std::vector<Offset<plan::RankFigures>> ranks;
  if (reached(Stage::complete)) {
    for (size_t i = 0; i < s.ranks.size(); ++i) {
      const RankFigures &r = s.ranks[i];
      if (i > 0 && sameFigures(s.ranks[i - 1], r))
        continue;
      ranks.push_back(plan::CreateRankFigures(
          b_, static_cast<int32_t>(r.rank), r.ownedParams, r.ownedElements, r.masterBytes,
          r.momentumBytes, r.peakBufferBytes, r.nsFlops, r.broadcastSend, r.broadcastRecv,
          r.reduceSend, r.reduceRecv, r.replicateSend, r.replicateRecv, r.allreduceBytes,
          r.gatherSend, r.gatherRecv, r.scatterSend, r.scatterRecv, r.dataAllreduceBytes,
          r.allgatherSend, r.allgatherRecv, r.reduceScatterSend, r.reduceScatterRecv, r.valueBytes,
          r.adamMomentBytes, r.gradBytes, r.memoryBytes));
    }
  }
  auto ranksVec = b_.CreateVector(ranks);
  auto lbKind = partitioned ? optString(s.lowerBoundKind) : Offset<String>();
  // 1.9: one row per pipeline stage, absent without a stage dim.
  Offset<flatbuffers::Vector<Offset<plan::PipelineStageStats>>> stagesVec;
  if (partitioned && !s.pipelineStages.empty()) {
    std::vector<Offset<plan::PipelineStageStats>> rows;
    for (const PipelineStageStats &r : s.pipelineStages)
      rows.push_back(plan::CreatePipelineStageStats(
          b_, r.stage, r.params, reached(Stage::hooks) ? r.firstHookGroup : -1,
          reached(Stage::hooks) ? r.hookGroups : 0, r.totalCost, r.lowerBound, r.maxLoad,
          r.imbalance, r.paramElements));
    stagesVec = b_.CreateVector(rows);
  }
  plan::StatsBuilder sb(b_);
  sb.add_slots(static_cast<int32_t>(m_.mesh.numFineSlots()));
  sb.add_slot_load_run_lengths(runLengthsVec);
  sb.add_slot_load_run_values(runValuesVec);
  if (partitioned) {
    sb.add_total_cost(s.totalCost);
    sb.add_lower_bound(s.lowerBound);
    sb.add_max_load(s.maxLoad);
    sb.add_imbalance(s.imbalance);
    sb.add_lpt_max_load(s.lptMaxLoad);
    sb.add_refinement_moves(s.refinementMoves);
    sb.add_layer_rule_violations(s.layerRuleViolations);
    sb.add_lower_bound_kind(lbKind);
    sb.add_simple_lower_bound(s.simpleLowerBound);
    sb.add_optimal(s.optimal);
    sb.add_small_unit_cap(s.smallUnitCap);
  }
  if (reached(Stage::layout))
    sb.add_max_owners_per_hook_group(s.maxOwnersPerHookGroup);
  sb.add_muon_params(muon);
  sb.add_adamw_params(adamw);
  sb.add_muon_elements(muonElems);
  sb.add_adamw_elements(adamwElems);
  sb.add_rank_runs(ranksVec);
  sb.add_pipeline_stages(stagesVec);
  return sb.Finish();
}

PlanBuffer Writer::run() {
  auto producer = b_.CreateString(std::string("dmuonc ") + DMUON_VERSION_STRING);
  auto source = b_.CreateString(common::escapedText(m_.source));
  auto modelName = b_.CreateString(m_.modelName);
  auto mesh = writeMesh();
  auto options = writeOptions();

  std::vector<Offset<plan::Param>> params;
  params.reserve(m_.params.size());
  for (const Param &p : m_.params)
    params.push_back(writeParam(p));
  auto paramsVec = b_.CreateVector(params);

  std::vector<Offset<plan::Unit>> units;
  if (reached(Stage::partition))
    for (const Unit &u : m_.units)
      units.push_back(writeUnit(u));
  auto unitsVec = b_.CreateVector(units);

  std::vector<Offset<plan::CommGroup>> commGroups;
  std::vector<int32_t> noComm;
  if (reached(Stage::group)) {
    noComm.assign(m_.noComm.begin(), m_.noComm.end());
    for (const CommGroup &g : m_.commGroups)
      commGroups.push_back(writeCommGroup(g));
  }
  auto noCommVec = b_.CreateVector(noComm);
  auto commVec = b_.CreateVector(commGroups);

  std::vector<Offset<plan::HookGroup>> hooks;
  if (reached(Stage::hooks))
    for (const HookGroup &h : m_.hookGroups)
      hooks.push_back(writeHookGroup(h));
  auto hooksVec = b_.CreateVector(hooks);

  auto stats = writeStats();
  std::vector<Offset<plan::QkClipPair>> qkClipPairs;
  if (reached(Stage::validate)) // where the keys are resolved
    for (const QkClipPair &q : m_.qkClip)
      qkClipPairs.push_back(plan::CreateQkClipPair(
          b_, q.query, q.key, static_cast<int32_t>(q.heads), static_cast<int32_t>(q.keyHeads),
          static_cast<int32_t>(q.headDim)));
  auto qkClip = b_.CreateVector(qkClipPairs);
  std::vector<Offset<plan::Buffer>> bufferTables;
  for (const ModelBuffer &buf : m_.buffers)
    bufferTables.push_back(plan::CreateBuffer(
        b_, b_.CreateString(buf.name), b_.CreateVector(buf.shape), b_.CreateString(buf.reason)));
  // Absent without buffers, as in every plan before 1.7.
  auto buffers = bufferTables.empty() ? 0 : b_.CreateVector(bufferTables);

  // The fingerprint must be physically present (stamped after Finish), so the
  // root table is written with every scalar, defaults included.
  b_.ForceDefaults(true);
  plan::PlanBuilder pb(b_);
  pb.add_format_major(DMUON_PLAN_FORMAT_MAJOR);
  pb.add_format_minor(DMUON_PLAN_FORMAT_MINOR);
  pb.add_producer(producer);
  pb.add_fingerprint(0);
  pb.add_stage(m_.stage);
  pb.add_source(source);
  pb.add_model_name(modelName);
  pb.add_mesh(mesh);
  pb.add_options(options);
  pb.add_params(paramsVec);
  pb.add_units(unitsVec);
  pb.add_no_comm(noCommVec);
  pb.add_comm_groups(commVec);
  pb.add_hook_groups(hooksVec);
  pb.add_stats(stats);
  pb.add_qk_clip(qkClip);
  if (!buffers.IsNull())
    pb.add_buffers(buffers);
  auto root = pb.Finish();
  b_.ForceDefaults(false);
  plan::FinishPlanBuffer(b_, root);

  PlanBuffer out(b_.Release());
  planfile::stampFingerprint(out.data(), out.size());
  return out;
}

} // namespace

PlanBuffer writePlan(const PlanModel &model) { return Writer(model).run(); }

std::string verifyWrittenPlan(const PlanBuffer &plan, Stage stage) {
  // writePlan stamped the fingerprint a moment ago (PlanRoundTripTest checks
  // that stamping and the readers' check agree).
  return planfile::verifyPlan(plan.data(), plan.size(), stage == Stage::complete,
                              /*checkFingerprint=*/false);
}

} // namespace dmuon
