// common/: the definitions the compiler, the runtime and the tools share.
#include "common/Hex.h"
#include "common/MeshIndex.h"
#include "common/PlanAccess.h"
#include "common/PlanRules.h"

#include <gtest/gtest.h>

#include <vector>

namespace dmuon {
namespace {

TEST(MeshIndex, RowMajorRankAndCoord) {
  const std::vector<int64_t> sizes{2, 3, 4};
  EXPECT_EQ(common::rowMajorRank(sizes, std::vector<int64_t>{0, 0, 0}), 0);
  EXPECT_EQ(common::rowMajorRank(sizes, std::vector<int>{1, 2, 3}), 23);
  EXPECT_EQ(common::rowMajorRank(sizes, std::vector<int>{1, 0, 2}), 14);
  for (int64_t rank = 0; rank < 24; ++rank)
    EXPECT_EQ(common::rowMajorRank(sizes, common::rowMajorCoord(sizes, rank)), rank);
  // A dim below 1 (an unverified plan) counts as 1.
  EXPECT_EQ(common::rowMajorCoord(std::vector<int64_t>{0, 4}, 3), (std::vector<int64_t>{0, 3}));
}

TEST(MeshIndex, SlotRank) {
  // dp_replicate=2, tp=2, dp_shard=4: slot (s, r) sits at tp coordinate 0.
  const std::vector<int64_t> sizes{2, 2, 4};
  EXPECT_EQ(common::slotRank(sizes, /*shardDim=*/2, /*replicateDim=*/0, 3, 1), 11);
  EXPECT_EQ(common::slotRank(sizes, 2, -1, 3, 0), 3);
  EXPECT_EQ(common::slotRank(sizes, 2, 0, -1, 0), -1);
}

TEST(MeshIndex, PlanMeshDims) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<plan::MeshDim>> dims{
      plan::CreateMeshDim(b, b.CreateString("dp_replicate"), 2),
      plan::CreateMeshDim(b, b.CreateString("dp_shard"), 4)};
  auto dimsVec = b.CreateVector(dims);
  plan::MeshBuilder mb(b);
  mb.add_dims(dimsVec);
  b.Finish(mb.Finish());
  const auto *mesh = flatbuffers::GetRoot<plan::Mesh>(b.GetBufferPointer());
  auto sizeOf = [](const plan::MeshDim *d) { return d->size(); };
  EXPECT_EQ(common::rowMajorRank(*mesh->dims(), std::vector<int>{1, 3}, sizeOf), 7);
  EXPECT_EQ(common::slotRank(*mesh->dims(), 1, 0, 2, 1, sizeOf), 6);
  EXPECT_EQ(common::rowMajorCoord(*mesh->dims(), 6, sizeOf), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(common::size(mesh->dims()), 2u);
  EXPECT_EQ(common::str(mesh->dims()->Get(1)->name()), "dp_shard");
  EXPECT_EQ(common::str(nullptr), "");
  EXPECT_EQ(common::size(static_cast<const flatbuffers::Vector<int32_t> *>(nullptr)), 0u);
}

TEST(PlanRules, Values) {
  EXPECT_EQ(common::hex64(0x5432078f2c2d69deULL), "0x5432078f2c2d69de");
  EXPECT_EQ(common::hex64(255), "0x00000000000000ff");
  EXPECT_FALSE(common::nsStepsInRange(0));
  EXPECT_TRUE(common::nsStepsInRange(1));
  EXPECT_TRUE(common::nsStepsInRange(100));
  EXPECT_FALSE(common::nsStepsInRange(101));
  EXPECT_EQ(common::nsStepsRangeText(), "between 1 and 100");
  EXPECT_EQ(common::dtypeBytes(plan::DType::f32), 4);
  EXPECT_EQ(common::dtypeBytes(plan::DType::bf16), 2);
  EXPECT_EQ(common::dtypeBytes(plan::DType::f16), 2);
  EXPECT_EQ(common::dtypeBytes(plan::DType::f64), 8);
  EXPECT_EQ(common::dtypeBytes(static_cast<plan::DType>(9)), 0);
  EXPECT_EQ(common::kMaxElements, int64_t(1) << 48);
}

} // namespace
} // namespace dmuon
