// Checkpoint files written into a directory that someone else can write to:
// a symlink planted at a name the writer uses for its temporary file must
// never be followed (the save would overwrite the file it points to, outside
// the checkpoint), and the writer removes only what it created.
#include "checkpoint/CheckpointFile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace ckpt = dmuon::rt::ckpt;
namespace fs = std::filesystem;

namespace {

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TempFiles : public ::testing::Test {
protected:
  void SetUp() override {
    char dir[] = "/tmp/dmuon-ckpt-files-XXXXXX", outside[] = "/tmp/dmuon-ckpt-outside-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    ASSERT_NE(::mkdtemp(outside), nullptr);
    dir_ = dir;
    outside_ = outside;
    victim_ = outside_ + "/victim";
    std::ofstream(victim_) << "precious\n";
  }
  void TearDown() override {
    fs::remove_all(dir_);
    fs::remove_all(outside_);
  }
  // A symlink to the victim at the fixed temp name a writer of `file` used.
  void plant(const std::string &file) {
    ASSERT_EQ(::symlink(victim_.c_str(), (dir_ + "/" + file + ".tmp").c_str()), 0);
  }
  void expectOutsideUntouched() {
    EXPECT_EQ(readText(victim_), "precious\n") << "the save wrote through the symlink";
    EXPECT_EQ(std::vector<fs::path>(fs::directory_iterator(outside_), {}).size(), 1u);
  }

  std::string dir_, outside_, victim_;
};

} // namespace

TEST_F(TempFiles, AShardWriterNeverFollowsASymlinkAtATempName) {
  const std::string name = "shard-0000000000000001-7-0000000000000002-r00000.dmck";
  plant(name);
  {
    ckpt::ShardWriter w;
    dmuon::rt::Status s = w.open(dir_ + "/" + name, {7, 2, 0});
    ASSERT_TRUE(s) << s.message();
    const std::vector<float> v(24, 1.5f);
    s = w.add("w", ckpt::Kind::Value, {{0, 0}, {4, 6}}, v.data(), v.size() * 4);
    ASSERT_TRUE(s) << s.message();
    s = w.commit();
    ASSERT_TRUE(s) << s.message();
  }
  expectOutsideUntouched();
  // The shard is a file of its own, and the planted links are left alone.
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir_ + "/" + name)));
  ckpt::ShardIndex index;
  dmuon::rt::Status s = ckpt::readShardIndex(dir_ + "/" + name, index);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(index.entries.size(), 1u);
  EXPECT_TRUE(fs::is_symlink(dir_ + "/" + name + ".tmp"));

  // A writer that fails half-way removes its own temp file and nothing else.
  {
    ckpt::ShardWriter w;
    ASSERT_TRUE(w.open(dir_ + "/shard-other.dmck", {7, 2, 0}));
  }
  size_t files = 0;
  for (const fs::directory_entry &e : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().filename().string().find("shard-other"), std::string::npos)
        << e.path() << " left behind";
  }
  EXPECT_EQ(files, 2u); // the shard and the planted link
}

TEST_F(TempFiles, AManifestWriterNeverFollowsASymlinkAtATempName) {
  plant("checkpoint");
  ckpt::Manifest m;
  m.step = 7;
  m.worldSize = 1;
  m.shards = {"shard-0000000000000001-7-0000000000000002-r00000.dmck"};
  dmuon::rt::Status s = ckpt::writeManifest(dir_, m);
  ASSERT_TRUE(s) << s.message();
  expectOutsideUntouched();
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir_ + "/checkpoint")));
  EXPECT_TRUE(fs::is_symlink(dir_ + "/checkpoint.tmp"));
  ckpt::Manifest back;
  s = ckpt::readManifest(dir_, back);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(back.step, 7);
}

// A shard belongs to the save its manifest records: its step, nonce and rank.
// Checkpoints from before shards recorded their save (format 2, no nonce in
// the manifest) still load; a mix of old and new is refused.
TEST(ShardBinding, AShardOfAnotherSaveOrRankIsRefusedNamingIt) {
  ckpt::Manifest m;
  m.step = 5;
  m.hasNonce = true;
  m.nonce = 0xabc;
  ckpt::ShardIndex shard;
  shard.path = "/ckpt/shard-x-r00001.dmck";
  shard.version = 3;
  shard.save = {5, 0xabc, 1};
  EXPECT_TRUE(ckpt::checkShardBelongs(shard, "/ckpt", m, 1));
  const struct {
    ckpt::SaveBinding save;
    uint32_t version;
    bool manifestHasNonce;
    const char *expect;
  } cases[] = {
      {{6, 0xabc, 1}, 3, true, "the shard is of step 6, the manifest of step 5"},
      {{5, 0xabd, 1},
       3,
       true,
       "the shard records save nonce 0x0000000000000abd, the manifest 0x0000000000000abc"},
      {{5, 0xabc, 0}, 3, true, "the shard is rank 0's, the manifest names it for rank 1"},
      {{0, 0, 0}, 2, true, "the shard is format 2, which records no save"},
      {{5, 0xabc, 1}, 3, false, "but the manifest records none"},
  };
  for (const auto &c : cases) {
    shard.save = c.save;
    shard.version = c.version;
    m.hasNonce = c.manifestHasNonce;
    dmuon::rt::Status s = ckpt::checkShardBelongs(shard, "/ckpt", m, 1);
    EXPECT_FALSE(s) << c.expect;
    EXPECT_NE(s.message().find("checkpoint shard '/ckpt/shard-x-r00001.dmck' does not belong to "
                               "the save that '/ckpt/checkpoint' records"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.message();
  }
  // An older checkpoint: format-2 shards, a manifest without a nonce.
  shard.version = 2;
  shard.save = {};
  m.hasNonce = false;
  EXPECT_TRUE(ckpt::checkShardBelongs(shard, "/ckpt", m, 1));
}

TEST_F(TempFiles, ADirectoryLockRefusesASecondSaveAtOnce) {
  using Mode = ckpt::DirectoryLock::Mode;
  {
    ckpt::DirectoryLock save, other;
    ASSERT_TRUE(save.acquire(dir_, Mode::Save));
    for (Mode mode : {Mode::Save, Mode::Load}) {
      dmuon::rt::Status s = other.acquire(dir_, mode);
      EXPECT_EQ(s.code(), DMUON_ERROR_INVALID_STATE);
      EXPECT_NE(s.message().find("checkpoint directory '" + dir_ +
                                 "' is in use by another checkpoint save"),
                std::string::npos)
          << s.message();
    }
  }
  {
    // Loads share it; a save waits for none of them, it is refused.
    ckpt::DirectoryLock load, load2, save;
    ASSERT_TRUE(load.acquire(dir_, Mode::Load));
    ASSERT_TRUE(load2.acquire(dir_, Mode::Load));
    EXPECT_EQ(save.acquire(dir_, Mode::Save).code(), DMUON_ERROR_INVALID_STATE);
    load.release();
    load2.release();
    dmuon::rt::Status s = save.acquire(dir_, Mode::Save);
    EXPECT_TRUE(s) << s.message();
  }
  // A symlink planted at the lock file's name is not followed.
  const std::string lock = dir_ + "/" + ckpt::kLockFileName;
  ASSERT_EQ(::unlink(lock.c_str()), 0);
  ASSERT_EQ(::symlink(victim_.c_str(), lock.c_str()), 0);
  ckpt::DirectoryLock save;
  dmuon::rt::Status s = save.acquire(dir_, Mode::Save);
  EXPECT_EQ(s.code(), DMUON_ERROR_IO);
  EXPECT_NE(s.message().find(lock), std::string::npos) << s.message();
  expectOutsideUntouched();
}
