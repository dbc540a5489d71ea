// The C ABI's NCCL communicator calls (dmuon_nccl_unique_id,
// dmuon_nccl_comm_init_rank, dmuon_nccl_comm_destroy): argument checks on any
// build, before the plugin; with the plugin, a unique id (no GPU needed) and,
// on a machine without a GPU, a communicator refused saying why; without it,
// DMUON_ERROR_UNSUPPORTED.
#include "dmuon/dmuon.h"

#include "RuntimeTestSupport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <string>

namespace {

using Id = std::array<unsigned char, DMUON_NCCL_UNIQUE_ID_BYTES>;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

TEST(NcclCommApi, ArgumentsAreCheckedBeforeThePlugin) {
  Id id{};
  void *comm = nullptr;
  EXPECT_EQ(dmuon_nccl_unique_id(id.data(), 64), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "id_size is 64")) << lastError();
  EXPECT_EQ(dmuon_nccl_unique_id(nullptr, id.size()), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dmuon_nccl_comm_init_rank(&comm, 4, id.data(), id.size(), 4, DMUON_UNSET),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "rank 4 is outside [0, 4)")) << lastError();
  EXPECT_EQ(dmuon_nccl_comm_init_rank(&comm, 0, id.data(), id.size(), 0, DMUON_UNSET),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "world_size is 0")) << lastError();
  EXPECT_EQ(dmuon_nccl_comm_init_rank(&comm, 1, id.data(), id.size(), 0, -2),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "device is -2")) << lastError();
  EXPECT_EQ(dmuon_nccl_comm_init_rank(&comm, 1, id.data(), 127, 0, DMUON_UNSET),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dmuon_nccl_comm_init_rank(nullptr, 1, id.data(), id.size(), 0, DMUON_UNSET),
            DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(dmuon_nccl_comm_destroy(nullptr), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dmuon_nccl_comm_destroy(&comm), DMUON_SUCCESS); // null: nothing to do
}

#ifdef DMUON_TEST_HAVE_NCCL_PLUGIN
TEST(NcclCommApi, UniqueIdsNeedNoGpuAndDiffer) {
  Id a{}, b{};
  ASSERT_EQ(dmuon_nccl_unique_id(a.data(), a.size()), DMUON_SUCCESS) << lastError();
  ASSERT_EQ(dmuon_nccl_unique_id(b.data(), b.size()), DMUON_SUCCESS) << lastError();
  EXPECT_NE(a, b);
  EXPECT_NE(a, Id{});
}

TEST(NcclCommApi, WithoutAGpuTheCommunicatorSaysSo) {
  if (access("/dev/nvidiactl", F_OK) == 0)
    GTEST_SKIP() << "a GPU is here: test/python/nccl_exchange_check.py makes the communicator";
  Id id{};
  ASSERT_EQ(dmuon_nccl_unique_id(id.data(), id.size()), DMUON_SUCCESS) << lastError();
  void *comm = nullptr;
  EXPECT_EQ(dmuon_nccl_comm_init_rank(&comm, 1, id.data(), id.size(), 0, DMUON_UNSET),
            DMUON_ERROR_BACKEND);
  EXPECT_TRUE(contains(lastError(), "no usable CUDA device")) << lastError();
  EXPECT_EQ(comm, nullptr);
}
#else
TEST(NcclCommApi, WithoutThePluginEveryCallIsUnsupported) {
  Id id{};
  void *comm = nullptr;
  EXPECT_EQ(dmuon_nccl_unique_id(id.data(), id.size()), DMUON_ERROR_UNSUPPORTED);
  EXPECT_TRUE(contains(lastError(), "NCCL backend is not available")) << lastError();
  EXPECT_EQ(dmuon_nccl_comm_init_rank(&comm, 1, id.data(), id.size(), 0, DMUON_UNSET),
            DMUON_ERROR_UNSUPPORTED);
  EXPECT_EQ(comm, nullptr);
}
#endif

} // namespace
