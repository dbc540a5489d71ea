// common/: the definitions the compiler, the runtime and the tools share.
#include "common/FirstSeenTable.h"
#include "common/Hex.h"
#include "common/MeshIndex.h"
#include "common/PlanAccess.h"
#include "common/PlanRules.h"
#include "common/ShardChunks.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
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
  EXPECT_EQ(common::chunkSizesOf(11, {{0}, {8}, {}}, 0), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(common::chunkSizesOf(10, {{0}, {4}, {}}, 0), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(common::chunkSizesOf(12, {{0}, {4}, {}}, 0), (std::vector<int64_t>{3}));
  EXPECT_EQ(common::chunkSizesOf(12, {{0}, {4}, {}}, 1), (std::vector<int64_t>{12}));
  // Every chunkSizesOf is what chunkOf gives over all coordinates.
  for (int64_t n = 1; n < 40; ++n)
    for (int64_t k = 1; k < 12; ++k) {
      std::set<int64_t> sizes;
      for (int64_t i = 0; i < k; ++i)
        sizes.insert(common::chunkOf(n, k, i).size);
      EXPECT_EQ(common::chunkSizesOf(n, {{0}, {k}, {}}, 0),
                std::vector<int64_t>(sizes.begin(), sizes.end()))
          << n << " over " << k;
    }
}

// Several mesh dims on one tensor dim split it one after the other in mesh
// order, each the chunk the ones before left (DTensor's nested Shard).
TEST(ShardChunks, NestedInMeshOrder) {
  // Mesh (tp=4, dp_shard=2, cp=2); tp and cp shard dim 0 of [10, 16].
  const common::ShardLayout layout{{0, -1, 0}, {4, 2, 2}, {}};
  EXPECT_EQ(common::largestLocalShape({10, 16}, layout), (std::vector<int64_t>{2, 16}));
  // tp coordinate 3 holds row 9 alone; its cp coordinate 1 nothing.
  const common::LocalSlice last = common::localSliceOf({10, 16}, layout, {3, 1, 0});
  EXPECT_EQ(last.shape, (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(last.offset, (std::vector<int64_t>{9, 0}));
  EXPECT_EQ(common::localSliceOf({10, 16}, layout, {3, 0, 1}).shape[0], 0);
  EXPECT_EQ(common::localSliceOf({10, 16}, layout, {1, 1, 1}).offset[0], 5);
  EXPECT_EQ(common::chunkSizesOf(10, layout, 0), (std::vector<int64_t>{0, 1, 2}));
}

// DTensor's _StridedShard docstring example: [8, 8] on mesh (dp=2, tp=2)
// with [_StridedShard(0, split_factor=2), Shard(0)] gives the rows of a
// tp-first split: (0, 1) rows 4-5, (1, 0) rows 2-3.
TEST(ShardChunks, StridedShardAsDTensor) {
  const common::ShardLayout layout{{0, 0}, {2, 2}, {2, 1}};
  auto rows = [&](int64_t dp, int64_t tp) {
    return common::localIntervalsOf({8, 8}, layout, {dp, tp})[0];
  };
  EXPECT_EQ(rows(0, 0)[0].offset, 0);
  EXPECT_EQ(rows(0, 1)[0].offset, 4);
  EXPECT_EQ(rows(1, 0)[0].offset, 2);
  EXPECT_EQ(rows(1, 1)[0].offset, 6);
  for (int64_t c = 0; c < 4; ++c)
    EXPECT_EQ(rows(c / 2, c % 2).size(), 1u);
  // StridedShard(0, 2) alone over ep=2 on 4 experts: {0, 2} and {1, 3}.
  const common::ShardLayout ep{{0}, {2}, {2}};
  const auto second = common::localIntervalsOf({4, 16, 32}, ep, {1});
  ASSERT_EQ(second[0].size(), 2u);
  EXPECT_EQ(second[0][0].offset, 1);
  EXPECT_EQ(second[0][0].size, 1);
  EXPECT_EQ(second[0][1].offset, 3);
  EXPECT_EQ(second[1].size(), 1u);
  EXPECT_EQ(second[1][0].size, 16);
}

// localIntervalsOf against the splits applied literally to index lists, for
// every small layout: Shard takes torch.chunk `coord` of what is left;
// StridedShard(d, k) cuts it into k equal blocks, each into n equal
// sub-blocks, and keeps sub-block `coord` of every block. localSliceOf's
// shape agrees, and, without StridedShard, its offset (one run per dim).
TEST(ShardChunks, IntervalsMatchLiteralSplits) {
  int checked = 0;
  for (int64_t n0 : {1, 2, 3})
    for (int64_t n1 : {1, 2, 4})
      for (int kind0 = 0; kind0 < 7; ++kind0)   // none, Shard / Strided k=2,3 on dim 0 / 1
        for (int kind1 = 0; kind1 < 7; ++kind1)
          for (int64_t r0 : {1, 4, 6, 12, 7})
            for (int64_t r1 : {2, 8, 5}) {
              const std::vector<int64_t> shape{r0, r1}, sizes{n0, n1};
              common::ShardLayout layout{{-1, -1}, sizes, {1, 1}};
              for (int m = 0; m < 2; ++m) {
                const int kind = m == 0 ? kind0 : kind1;
                if (kind == 0)
                  continue;
                layout.tensorDimOf[m] = (kind - 1) % 2;
                layout.splitFactors[m] = kind <= 2 ? 1 : kind <= 4 ? 2 : 3;
              }
              for (int64_t a = 0; a < n0; ++a)
                for (int64_t b = 0; b < n1; ++b) {
                  const std::vector<int64_t> coord{a, b};
                  // The literal splits, per tensor dim.
                  std::vector<std::vector<int64_t>> idx(2);
                  bool even = true;
                  for (int t = 0; t < 2; ++t)
                    for (int64_t i = 0; i < shape[t]; ++i)
                      idx[t].push_back(i);
                  for (int m = 0; m < 2; ++m) {
                    const int t = layout.tensorDimOf[m];
                    if (t < 0)
                      continue;
                    const std::vector<int64_t> cur = idx[t];
                    const int64_t L = static_cast<int64_t>(cur.size()), n = sizes[m];
                    const int64_t k = layout.splitFactors[m];
                    std::vector<int64_t> next;
                    if (k == 1) {
                      const int64_t c = (L + n - 1) / n;
                      for (int64_t i = coord[m] * c; i < std::min(L, (coord[m] + 1) * c); ++i)
                        next.push_back(cur[i]);
                    } else {
                      even = even && L % (k * n) == 0;
                      const int64_t block = L / k, sub = block / n;
                      for (int64_t j = 0; j < k; ++j)
                        for (int64_t i = 0; i < sub; ++i)
                          next.push_back(cur[j * block + coord[m] * sub + i]);
                    }
                    idx[t] = next;
                  }
                  if (!even)
                    continue; // the compiler refuses uneven StridedShard
                  const auto runs = common::localIntervalsOf(shape, layout, coord);
                  const common::LocalSlice slice = common::localSliceOf(shape, layout, coord);
                  for (int t = 0; t < 2; ++t) {
                    std::vector<int64_t> flat;
                    for (const common::Chunk &r : runs[t]) {
                      EXPECT_GT(r.size, 0);
                      for (int64_t i = 0; i < r.size; ++i)
                        flat.push_back(r.offset + i);
                    }
                    EXPECT_EQ(flat, idx[t]) << "shape " << r0 << "x" << r1 << " mesh " << n0
                                            << "x" << n1 << " kinds " << kind0 << "," << kind1
                                            << " coord " << a << "," << b << " dim " << t;
                    EXPECT_EQ(slice.shape[t], static_cast<int64_t>(idx[t].size()));
                    bool strided = false;
                    for (int m = 0; m < 2; ++m)
                      strided |= layout.tensorDimOf[m] == t && layout.splitFactors[m] > 1;
                    if (!strided && !runs[t].empty()) {
                      EXPECT_EQ(runs[t].size(), 1u);
                      EXPECT_EQ(slice.offset[t], runs[t][0].offset);
                    }
                  }
                  ++checked;
                }
            }
  EXPECT_GT(checked, 1000);
}

// DTensor refuses a _StridedShard whose blocks are not equal; the compiler
// and the verifier refuse the same layouts.
TEST(ShardChunks, StridedSplitsEven) {
  using common::ShardLayout;
  using common::stridedSplitsEven;
  // One mesh dim: StridedShard(0, 2) over ep=2 needs rows divisible by 4.
  const ShardLayout ep{{0}, {2}, {2}};
  EXPECT_TRUE(stridedSplitsEven(8, ep, 0));
  EXPECT_FALSE(stridedSplitsEven(6, ep, 0));
  EXPECT_TRUE(stridedSplitsEven(6, ep, 1)); // another dim: nothing strided there
  // ep=2 strided by 2, then tp=3: 12 -> blocks of 3 over ep, then 6 over tp.
  const ShardLayout epTp{{0, 0}, {2, 3}, {2, 1}};
  EXPECT_TRUE(stridedSplitsEven(12, epTp, 0));
  EXPECT_FALSE(stridedSplitsEven(8, epTp, 0)); // 8 / 2 = 4 left to tp=3
  // tp=2 first, then a strided dim over what it left: 8 / 2 = 4, k * n = 4.
  const ShardLayout tpEp{{0, 0}, {2, 2}, {1, 2}};
  EXPECT_TRUE(stridedSplitsEven(8, tpEp, 0));
  EXPECT_FALSE(stridedSplitsEven(12, tpEp, 0)); // 6 left, not a multiple of 4
  // Plain Shards split unevenly as torch.chunk does; no strided rule applies.
  EXPECT_TRUE(stridedSplitsEven(7, ShardLayout{{0}, {2}, {1}}, 0));
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

// The first item of each key, against a std::map over the same keys: many
// repeats, keys that share a hash (every probe then meets the other key's
// tag and must ask sameKey), and a table filled to the n it was sized for.
TEST(FirstSeenTable, FirstOfEachKeyAsAMap) {
  constexpr uint32_t n = 5000;
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < n; ++i)
    keys.push_back("k" + std::to_string(i * 7919 % 1733)); // 1733 distinct, repeated
  for (bool sameHash : {false, true}) {
    common::FirstSeenTable table(n);
    std::map<std::string, uint32_t> first;
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t hash = sameHash ? 42 : common::FirstSeenTable::hashOf(keys[i]);
      if (i + 3 < n)
        table.prefetch(common::FirstSeenTable::hashOf(keys[i + 3]));
      const uint32_t got =
          table.insert(hash, i, [&](uint32_t other) { return keys[other] == keys[i]; });
      const uint32_t expected = first.try_emplace(keys[i], i).first->second;
      ASSERT_EQ(got, expected) << keys[i] << (sameHash ? " (one hash)" : "");
    }
  }
  common::FirstSeenTable full(n);
  for (uint32_t i = 0; i < n; ++i) // n distinct keys: the table never runs out of slots
    ASSERT_EQ(full.insert(common::FirstSeenTable::hashOf(std::to_string(i)), i,
                          [](uint32_t) { return false; }),
              i);
}

} // namespace
} // namespace dmuon
