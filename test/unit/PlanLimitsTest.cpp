// The limits every reader of a plan checks: the plan reader refuses a file
// over 2 GiB (FlatBuffers' limit, common/BoundedRead.h) before reading it.
#include "plan/PlanFile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace dmuon;

TEST(PlanLimits, ReadFileRefusesAFileOverItsLimitUnread) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("dmuon-limits-" + std::to_string(::getpid())))
          .string();
  { std::ofstream(path, std::ios::binary) << "0123456789"; }
  std::vector<uint8_t> out;
  EXPECT_EQ(planfile::readFile(path, out, 10), "");
  EXPECT_EQ(out.size(), 10u);
  EXPECT_EQ(planfile::readFile(path, out, 9), "the file is larger than 9 bytes, the limit for a plan");
  EXPECT_TRUE(out.empty());
  ASSERT_EQ(::truncate(path.c_str(), int64_t(3) << 30), 0); // sparse
  EXPECT_EQ(planfile::readFile(path, out), "the file is larger than 2 GiB, the limit for a plan");
  std::filesystem::remove(path);
}
