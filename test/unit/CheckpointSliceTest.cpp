// Checkpoint entries that hold slices of a param (checkpoint/CheckpointSlice.h):
// a rank's slice assembled from the entries that overlap it, whatever the
// layout they were saved under; format-1 shards (whole params) still read;
// overlapping, missing and out-of-shape slices refused with the param's name
// and the slices; StridedShard slices saved and loaded as several boxes.
#include "checkpoint/CheckpointFile.h"
#include "checkpoint/CheckpointSlice.h"
#include "plan/Fingerprint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ckpt = dmuon::rt::ckpt;

namespace {

// The 4 x 6 param of the tests: value r * 6 + c at (r, c).
const std::vector<int64_t> kShape = {4, 6};

std::vector<float> valuesOf(const ckpt::Slice &s) {
  std::vector<float> out;
  for (int64_t r = s.offset[0]; r < s.offset[0] + s.shape[0]; ++r)
    for (int64_t c = s.offset[1]; c < s.offset[1] + s.shape[1]; ++c)
      out.push_back(static_cast<float>(r * 6 + c));
  return out;
}

ckpt::Slice box(int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
  return {{r0, c0}, {rows, cols}};
}

class Slices : public ::testing::Test {
protected:
  void SetUp() override {
    char dir[] = "/tmp/dmuon-slices-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // One shard file per slice, each an entry of param "w" holding its values.
  void save(const std::vector<ckpt::Slice> &slices) {
    shards_.clear();
    for (size_t i = 0; i < slices.size(); ++i) {
      const std::string path = dir_ + "/shard-" + std::to_string(i) + ".dmck";
      ckpt::ShardWriter w;
      ASSERT_TRUE(w.open(path, {0, 0, static_cast<uint32_t>(i)}));
      const std::vector<float> v = valuesOf(slices[i]);
      dmuon::rt::Status s = w.add("w", ckpt::Kind::Value, slices[i], v.data(), v.size() * 4);
      ASSERT_TRUE(s) << s.message();
      ASSERT_TRUE(w.commit());
      shards_.emplace_back();
      s = ckpt::readShardIndex(path, shards_.back());
      ASSERT_TRUE(s) << s.message();
    }
  }

  dmuon::rt::Status read(const ckpt::Slice &want, std::vector<float> &out) {
    ckpt::Catalog catalog(shards_);
    return catalog.read(dir_, "w", ckpt::Kind::Value, kShape, want, out);
  }

  std::string dir_;
  std::vector<ckpt::ShardIndex> shards_;
};

} // namespace

TEST_F(Slices, ARankAssemblesItsSliceFromAnyLayout) {
  save({box(0, 2, 0, 6), box(2, 2, 0, 6)}); // row shards, as tp=2 on dim 0
  for (const ckpt::Slice &want : {box(0, 4, 0, 6), box(0, 2, 0, 6), box(1, 2, 2, 3),
                                  box(0, 4, 3, 3), box(3, 1, 5, 1)}) {
    std::vector<float> got;
    dmuon::rt::Status s = read(want, got);
    ASSERT_TRUE(s) << ckpt::describe(want) << ": " << s.message();
    EXPECT_EQ(got, valuesOf(want)) << ckpt::describe(want);
  }
}

TEST_F(Slices, MissingOverlappingAndOutOfShapeSlicesAreRefused) {
  std::vector<float> got;
  save({box(0, 2, 0, 6)});
  dmuon::rt::Status s = read(box(0, 4, 0, 6), got);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("value of 'w' holds the slices [0:2, 0:6], which leave 12 of the 24 "
                             "values of this rank's slice [0:4, 0:6] that no entry holds"),
            std::string::npos)
      << s.message();

  save({box(0, 3, 0, 6), box(2, 2, 0, 6)});
  s = read(box(0, 4, 0, 6), got);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("is corrupt: entries of the value of 'w' overlap"), std::string::npos)
      << s.message();

  save({box(3, 2, 0, 6)});
  s = read(box(0, 4, 0, 6), got);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("its slice [3:5, 0:6] lies outside the param's dim 0 of size 4"),
            std::string::npos)
      << s.message();

  s = ckpt::Catalog(shards_).read(dir_, "v", ckpt::Kind::Value, kShape, box(0, 4, 0, 6), got);
  EXPECT_NE(s.message().find("has no value for param 'v'"), std::string::npos) << s.message();
}

// A format-1 shard: the same header and entries, without slices; each entry
// holds its whole param.
TEST_F(Slices, FormatOneShardsHoldWholeParams) {
  const std::vector<float> v = valuesOf(box(0, 4, 0, 6));
  const uint64_t bytes = v.size() * 4;
  const uint64_t hash = dmuon::planfile::fnv1a64(reinterpret_cast<const uint8_t *>(v.data()), bytes);
  std::string index;
  auto put = [&](const void *p, size_t n) { index.append(static_cast<const char *>(p), n); };
  const uint16_t len = 1;
  const uint8_t kind = 0;
  const uint64_t offset = 24;
  put(&len, 2);
  put("w", 1);
  put(&kind, 1);
  put(&offset, 8);
  put(&bytes, 8);
  put(&hash, 8);
  const uint64_t sum =
      dmuon::planfile::fnv1a64(reinterpret_cast<const uint8_t *>(index.data()), index.size());
  put(&sum, 8);
  const uint32_t version = 1, count = 1;
  const uint64_t indexOffset = 24 + bytes;
  const std::string path = dir_ + "/shard-v1.dmck";
  {
    std::ofstream f(path, std::ios::binary);
    f.write("DMCKSHRD", 8);
    f.write(reinterpret_cast<const char *>(&version), 4);
    f.write(reinterpret_cast<const char *>(&count), 4);
    f.write(reinterpret_cast<const char *>(&indexOffset), 8);
    f.write(reinterpret_cast<const char *>(v.data()), static_cast<std::streamsize>(bytes));
    f.write(index.data(), static_cast<std::streamsize>(index.size()));
  }
  shards_.resize(1);
  dmuon::rt::Status s = ckpt::readShardIndex(path, shards_[0]);
  ASSERT_TRUE(s) << s.message();
  ASSERT_EQ(shards_[0].entries.size(), 1u);
  EXPECT_EQ(ckpt::describe(shards_[0].entries[0].slice), "[whole]");
  std::vector<float> got;
  s = read(box(2, 2, 0, 6), got); // a tp=2 rank's rows from a whole param
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(got, valuesOf(box(2, 2, 0, 6)));
}

// A StridedShard(0, 2) param over 2 ranks: rank c holds rows {c, c + 2} of
// the 4 x 6 param, as two boxes. Each rank's local tensor goes out box by
// box (extractBox) as the executor saves it; the entries read back into
// another rank's boxes (placeBox), into Shard slices and into the whole.
TEST_F(Slices, StridedShardSlicesSaveAsBoxesAndLoadInAnyLayout) {
  const dmuon::common::ShardLayout strided{{0}, {2}, {2}};
  std::vector<ckpt::LocalBoxes> ranks;
  std::vector<ckpt::Slice> entries;
  std::vector<std::vector<float>> data;
  for (int64_t c = 0; c < 2; ++c) {
    ranks.push_back(ckpt::boxesOf(dmuon::common::localIntervalsOf(kShape, strided, {c})));
    const ckpt::LocalBoxes &b = ranks.back();
    ASSERT_EQ(b.global.size(), 2u);
    EXPECT_EQ(b.localShape, (std::vector<int64_t>{2, 6}));
    EXPECT_EQ(ckpt::describe(b.global[0]), "[" + std::to_string(c) + ":" +
                                               std::to_string(c + 1) + ", 0:6]");
    EXPECT_EQ(ckpt::describe(b.global[1]), "[" + std::to_string(c + 2) + ":" +
                                               std::to_string(c + 3) + ", 0:6]");
    EXPECT_EQ(ckpt::describe(b.local[1]), "[1:2, 0:6]");
    // The rank's local tensor: its rows in local order.
    std::vector<float> local = valuesOf(b.global[0]), second = valuesOf(b.global[1]);
    local.insert(local.end(), second.begin(), second.end());
    for (size_t i = 0; i < b.global.size(); ++i) {
      std::vector<float> out;
      ckpt::extractBox(b, i, local.data(), out);
      EXPECT_EQ(out, valuesOf(b.global[i]));
      entries.push_back(b.global[i]);
    }
  }
  save(entries);
  // Box by box into a strided rank's local tensor.
  for (const ckpt::LocalBoxes &b : ranks) {
    std::vector<float> local(static_cast<size_t>(b.numel()), -1.0f), got;
    for (size_t i = 0; i < b.global.size(); ++i) {
      ASSERT_TRUE(read(b.global[i], got));
      ckpt::placeBox(b, i, got.data(), local.data());
    }
    std::vector<float> want = valuesOf(b.global[0]), second = valuesOf(b.global[1]);
    want.insert(want.end(), second.begin(), second.end());
    EXPECT_EQ(local, want);
  }
  // As Shard(0) over 2, and whole: each from two strided entries.
  for (const ckpt::Slice &want : {box(0, 2, 0, 6), box(2, 2, 0, 6), box(0, 4, 0, 6)}) {
    std::vector<float> got;
    dmuon::rt::Status s = read(want, got);
    ASSERT_TRUE(s) << s.message();
    EXPECT_EQ(got, valuesOf(want));
  }
  // A Shard layout is one box, the whole local tensor.
  const dmuon::common::ShardLayout shard{{1}, {2}, {1}};
  const ckpt::LocalBoxes one = ckpt::boxesOf(dmuon::common::localIntervalsOf(kShape, shard, {1}));
  ASSERT_TRUE(one.whole());
  EXPECT_EQ(ckpt::describe(one.global[0]), "[0:4, 3:6]");
}
