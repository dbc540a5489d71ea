// common/: the definitions the compiler, the runtime and the tools share.
#include "common/Hex.h"
#include "common/MeshIndex.h"
#include "common/PlanAccess.h"
#include "common/PlanRules.h"
#include "common/ShardChunks.h"

#include <gtest/gtest.h>

#include <set>
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

// torch.chunk's split, which DTensor's Shard follows: ceil(n / k) each, the
// last ones smaller or empty.
TEST(ShardChunks, TorchChunk) {
  EXPECT_EQ(common::chunkOf(50257, 2, 0).size, 25129);
  EXPECT_EQ(common::chunkOf(50257, 2, 1).offset, 25129);
  EXPECT_EQ(common::chunkOf(50257, 2, 1).size, 25128);
  // 10 over 4: 3, 3, 3, 1; 6 over 4: 2, 2, 2, 0; 11 over 8: 2 x 5, 1, 0, 0.
  EXPECT_EQ(common::chunkOf(10, 4, 3).size, 1);
  EXPECT_EQ(common::chunkOf(6, 4, 3).size, 0);
  EXPECT_EQ(common::chunkOf(6, 4, 3).offset, 6);
  EXPECT_EQ(common::chunkSizesOf(11, {{0}, {8}}, 0), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(common::chunkSizesOf(10, {{0}, {4}}, 0), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(common::chunkSizesOf(12, {{0}, {4}}, 0), (std::vector<int64_t>{3}));
  EXPECT_EQ(common::chunkSizesOf(12, {{0}, {4}}, 1), (std::vector<int64_t>{12}));
  // Every chunkSizesOf is what chunkOf gives over all coordinates.
  for (int64_t n = 1; n < 40; ++n)
    for (int64_t k = 1; k < 12; ++k) {
      std::set<int64_t> sizes;
      for (int64_t i = 0; i < k; ++i)
        sizes.insert(common::chunkOf(n, k, i).size);
      EXPECT_EQ(common::chunkSizesOf(n, {{0}, {k}}, 0),
                std::vector<int64_t>(sizes.begin(), sizes.end()))
          << n << " over " << k;
    }
}

// Several mesh dims on one tensor dim split it one after the other in mesh
// order, each the chunk the ones before left (DTensor's nested Shard).
TEST(ShardChunks, NestedInMeshOrder) {
  // Mesh (tp=4, dp_shard=2, cp=2); tp and cp shard dim 0 of [10, 16].
  const common::ShardLayout layout{{0, -1, 0}, {4, 2, 2}};
  EXPECT_EQ(common::largestLocalShape({10, 16}, layout), (std::vector<int64_t>{2, 16}));
  // tp coordinate 3 holds row 9 alone; its cp coordinate 1 nothing.
  const common::LocalSlice last = common::localSliceOf({10, 16}, layout, {3, 1, 0});
  EXPECT_EQ(last.shape, (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(last.offset, (std::vector<int64_t>{9, 0}));
  EXPECT_EQ(common::localSliceOf({10, 16}, layout, {3, 0, 1}).shape[0], 0);
  EXPECT_EQ(common::localSliceOf({10, 16}, layout, {1, 1, 1}).offset[0], 5);
  EXPECT_EQ(common::chunkSizesOf(10, layout, 0), (std::vector<int64_t>{0, 1, 2}));
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
