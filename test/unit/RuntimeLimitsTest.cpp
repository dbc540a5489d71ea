// The runtime's limits on what a host or a file gives it: over-long param
// names at the C ABI and the size of a plan file.
#include "RuntimeTestSupport.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

std::string makeTempDir() {
  char dir[] = "/tmp/dmuon-limits-XXXXXX";
  EXPECT_NE(::mkdtemp(dir), nullptr);
  return dir;
}

} // namespace

TEST_F(OneRank, OverLongParamNamesAreRefusedAsSuch) {
  std::string name(5000, 'w');
  std::vector<float> v(4, 0.f);
  EXPECT_EQ(dmuon_runtime_bind_param(rt, name.c_str(), v.data(), 4),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("is longer than 4096 bytes"), std::string::npos) << err();
}

TEST(RuntimeLimits, APlanFileOver2GiBIsRefusedUnread) {
  const std::string dir = makeTempDir(), path = dir + "/huge.plan";
  { std::ofstream(path, std::ios::binary); }
  ASSERT_EQ(::truncate(path.c_str(), int64_t(3) << 30), 0); // sparse: costs nothing
  dmuon_plan_t plan = nullptr;
  EXPECT_NE(dmuon_plan_load_file(path.c_str(), &plan), DMUON_SUCCESS);
  EXPECT_EQ(plan, nullptr);
  EXPECT_NE(lastError().find("larger than 2 GiB, the limit for a plan"), std::string::npos)
      << lastError();
  std::filesystem::remove_all(dir);
}
