// The plan the writer/verifier/printer tests share: a small complete model
// (makeModel), and helpers to verify, mutate and restamp its bytes.
#ifndef DMUON_TEST_UNIT_PLANTESTMODEL_H
#define DMUON_TEST_UNIT_PLANTESTMODEL_H

#include "support/Diagnostics.h"
#include "Mesh.h"
#include "Model.h"
#include "PlanWriter.h"
#include "plan/PlanFile.h"

#include "gtest/gtest.h"

#include <string>
#include <vector>

namespace dmuon::plan_test {

inline Param makeParam(const std::string &name, std::vector<int64_t> shape, Role role, size_t ndims) {
  Param p;
  p.name = name;
  p.shape = std::move(shape);
  p.placements.assign(ndims, Placement{});
  p.localShape = p.shape;
  p.role = role;
  if (role == Role::muon) {
    p.roleReason = RoleReason::default_matrix;
    p.rows = p.localRows = p.shape[0];
    p.cols = p.localCols = p.shape[1];
  } else {
    p.roleReason = RoleReason::default_vector;
  }
  return p;
}

// A complete plan for a 2x4 HSDP mesh (plus a tensor-parallel dim of size 1):
// two Muon matrices in one hook group, owned by slots 5 = (1,1) and 2 = (2,0)
// (the second a comm param gathered over tp), and one AdamW vector.
inline PlanModel makeModel() {
  PlanModel m;
  m.source = "tiny.toml";
  m.modelName = "tiny";
  m.mesh.dims = {{"dp_replicate", 2}, {"dp_shard", 4}, {"tp", 1}};
  m.mesh.replicateDim = 0;
  m.mesh.shardDim = 1;

  m.params.push_back(makeParam("layers.0.q.weight", {64, 64}, Role::muon, 3));
  m.params.push_back(makeParam("layers.0.norm.weight", {64}, Role::adamw, 3));
  m.params.back().dtype = DType::bf16;
  m.params.push_back(makeParam("layers.0.up.weight", {128, 64}, Role::muon, 3));
  m.params[2].placements[2] = Placement{PlacementKind::shard, 0, 1, "sum"};
  m.params[2].gatherMeshDim = 2;
  m.params[2].gatherTensorDim = 0;
  m.params[2].computeIndex = 0;
  m.params[2].recovered = std::make_shared<const RecoveredName>(
      RecoveredName{"onnx::MatMul_7", "from node /layers.0/up/MatMul"});

  m.params[0].group = ShardingGroupKind::no_comm;
  m.params[2].group = ShardingGroupKind::comm;
  m.params[2].commGroup = 0;
  m.noComm = {0};
  CommGroup cg;
  cg.key = "Replicate,Replicate,Shard(0)";
  cg.params = {2};
  cg.shardDims = {1};
  cg.replicateMeshDims = {0};
  m.commGroups.push_back(cg);

  for (int i : {0, 2}) {
    m.params[i].layer = "layers.0";
    m.params[i].unit = i == 0 ? 0 : 1;
    m.params[i].cost = i == 0 ? 5242880.0 : 7340032.5;
    m.params[i].hookGroup = 0;
  }
  Unit u0{"layers.0.q.weight", "layers.0", {0}, 5242880.0, 5};
  Unit u1{"layers.0.up.weight", "layers.0", {2}, 7340032.5, 2};
  m.units = {u0, u1};

  m.params[0].offset = 0;
  m.params[0].bytes = 16384;
  m.params[0].reduceOffset = 0;
  m.params[0].reduceBytes = 16384;
  m.params[2].offset = 16384;
  m.params[2].bytes = 32768;
  m.params[2].reduceOffset = 16384;
  m.params[2].reduceBytes = 32768;
  m.params[1].bytes = 256;

  HookGroup h;
  h.name = "layers.0";
  h.params = {0, 2};
  h.bufferBytes = 49152;
  h.reduceBufferBytes = 49152;
  Segment s2{2, m.mesh.slotRank(2, 0), 16384, 32768, 16384, 32768, {2}};
  Segment s5{5, m.mesh.slotRank(1, 1), 0, 16384, 0, 16384, {0}};
  h.segments = {s2, s5};
  m.hookGroups.push_back(h);

  m.stats.slotLoad.assign(8, 0.0);
  m.stats.slotLoad[5] = 5242880.0;
  m.stats.slotLoad[2] = 7340032.5;
  m.stats.totalCost = 12582912.5;
  m.stats.lowerBound = 7340032.5;
  m.stats.maxLoad = 7340032.5;
  m.stats.imbalance = 1.0;
  m.stats.lptMaxLoad = 7340032.5;
  for (int64_t r = 0; r < 8; ++r) {
    RankFigures f;
    f.rank = r;
    f.nsFlops = m.stats.slotLoad[r % 4 + 4 * (r / 4)];
    f.masterBytes = r == 5 ? 16384 : r == 2 ? 32768 : 0;
    f.allreduceBytes = 256;
    m.stats.ranks.push_back(f);
  }
  m.stage = Stage::complete;
  return m;
}

inline std::string verify(const std::vector<uint8_t> &b, bool requireComplete = true) {
  return planfile::verifyPlan(b.data(), b.size(), requireComplete);
}

inline plan::Plan *mutablePlan(std::vector<uint8_t> &b) { return plan::GetMutablePlan(b.data()); }

inline void restamp(std::vector<uint8_t> &b) { ASSERT_TRUE(planfile::stampFingerprint(b.data(), b.size())); }

inline bool contains(const std::string &s, const std::string &sub) {
  return s.find(sub) != std::string::npos;
}

} // namespace dmuon::plan_test

#endif
