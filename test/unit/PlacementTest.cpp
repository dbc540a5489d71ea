#include "Placement.h"

#include <gtest/gtest.h>

using namespace dmuon;

namespace {

Placement ok(const std::string &text) {
  Placement p;
  std::string err;
  size_t col = 0;
  EXPECT_TRUE(parsePlacement(text, p, err, col)) << text << ": " << err;
  return p;
}

std::string fails(const std::string &text) {
  Placement p;
  std::string err;
  size_t col = 0;
  EXPECT_FALSE(parsePlacement(text, p, err, col)) << text;
  return err;
}

} // namespace

TEST(Placement, ParsesEveryKindAndPrintsItBack) {
  EXPECT_EQ(ok("Replicate").str(), "Replicate");
  EXPECT_EQ(ok("Replicate()").str(), "Replicate");
  EXPECT_EQ(ok("Shard(0)").str(), "Shard(0)");
  EXPECT_EQ(ok(" Shard( -1 ) ").dim, -1);
  EXPECT_EQ(ok("StridedShard(0, 2)").str(), "StridedShard(0, 2)");
  EXPECT_EQ(ok("Partial(avg)").str(), "Partial(avg)");
  EXPECT_EQ(ok("Partial").str(), "Partial(sum)");
}

TEST(Placement, StridedShardGroupsAsShard) {
  Placement p = ok("StridedShard(1, 4)");
  EXPECT_TRUE(p.isShard());
  EXPECT_EQ(p.groupKey(), "Shard(1)");
}

TEST(Placement, RejectsMalformedText) {
  EXPECT_NE(fails("Shard").find("expected '('"), std::string::npos);
  EXPECT_NE(fails("Shard(x)").find("tensor dim"), std::string::npos);
  EXPECT_NE(fails("StridedShard(0)").find("split_factor"), std::string::npos);
  EXPECT_NE(fails("Partial(mul)").find("unknown Partial reduce op"), std::string::npos);
  EXPECT_NE(fails("Sharded(0)").find("unknown placement"), std::string::npos);
  EXPECT_NE(fails("Shard(0) x").find("unexpected text"), std::string::npos);
}
