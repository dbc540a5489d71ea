// Checkpoint manifests and files through the C ABI on one rank: every value,
// key and shard line of a manifest is checked, and the work a checkpoint
// directory can cause is bounded (no blocking on a FIFO, no reading a device
// or an oversized manifest). Each case names the message a user sees.
#include "RuntimeTestSupport.h"
#include "plan/Fingerprint.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace {

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Rewrites a manifest's body with `edit` and re-stamps its checksum, so only
// the edited value can make the load fail.
template <typename Edit> void rewriteManifest(const std::string &path, Edit edit) {
  std::string text = readText(path);
  std::string body = text.substr(0, text.rfind("end 0x"));
  edit(body);
  char end[40];
  std::snprintf(
      end, sizeof end, "end 0x%016" PRIx64 "\n",
      dmuon::planfile::fnv1a64(reinterpret_cast<const uint8_t *>(body.data()), body.size()));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << body << end;
}

// The line that starts with `key `, whole.
std::string lineOf(const std::string &body, const std::string &key) {
  size_t at = body.find("\n" + key + " ");
  EXPECT_NE(at, std::string::npos) << key;
  if (at == std::string::npos)
    return {};
  return body.substr(at + 1, body.find('\n', at + 1) - at - 1);
}

void replaceLine(std::string &body, const std::string &key, const std::string &line) {
  const std::string old = lineOf(body, key);
  ASSERT_FALSE(old.empty()) << key;
  body.replace(body.find("\n" + old + "\n") + 1, old.size(), line);
}

// A runtime on the 1-rank plan with a saved checkpoint in dir_.
class Checkpoint : public OneRank {
protected:
  void SetUp() override {
    OneRank::SetUp();
    bindAll(0.25f);
    dir_ = makeTempDir();
    manifest_ = dir_ + "/checkpoint";
    ASSERT_EQ(dmuon_checkpoint_save(rt, dir_.c_str(), 7), DMUON_SUCCESS) << err();
    good_ = readText(manifest_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    OneRank::TearDown();
  }
  // Loads dir_ and expects INVALID_ARGUMENT (or `code`) with `expect` in the message.
  void expectRefused(const std::string &expect,
                     dmuon_status_t code = DMUON_ERROR_INVALID_ARGUMENT) {
    int64_t step = -1;
    EXPECT_EQ(dmuon_checkpoint_load(rt, dir_.c_str(), &step), code) << expect;
    EXPECT_NE(err().find(expect), std::string::npos)
        << "expected: " << expect << "\n     got: " << err();
    EXPECT_EQ(step, -1);
  }
  void restore() { std::ofstream(manifest_, std::ios::binary | std::ios::trunc) << good_; }

  std::string dir_, manifest_, good_;
};

} // namespace

TEST_F(Checkpoint, EveryManifestValueIsChecked) {
  const struct {
    const char *key, *line, *expect;
  } cases[] = {
      {"step", "step banana", "manifest line 'step banana': step must be an integer >= 0"},
      {"step", "step 7x", "step must be an integer >= 0"},
      {"step", "step  7", "expected '<key> <value>'"},
      {"adamw_step", "adamw_step -1", "adamw_step must be an integer between 0 and 2^53"},
      {"world_size", "world_size 0", "world_size must be an integer between 1 and"},
      {"steps_applied", "steps_applied 99999999999999999999", "steps_applied must be an integer"},
      {"steps_skipped", "steps_skipped 9007199254740993", "between 0 and 2^53"},
      {"plan_fingerprint", "plan_fingerprint 0x12", "plan_fingerprint must be 0x and 16 hex"},
      {"nonce", "nonce 12", "nonce must be 0x and 16 hex digits"},
      {"model_fingerprint", "model_fingerprint 0x0x23456789abcdef",
       "model_fingerprint must be 0x and 16 hex"},
      {"hyper_momentum", "hyper_momentum 0x1p+1", "hyper_momentum=2 must be a number in [0, 1)"},
      {"hyper_lr", "hyper_lr nan", "hyper_lr=nan must be a number in [0, 10]"},
      {"hyper_lr", "hyper_lr  0x1p-6", "expected '<key> <value>'"},
      {"step", "step 1 2", "expected '<key> <value>'"},
      {"shard", "shard ../checkpoint", "a shard is named shard-<...>.dmck"},
      {"shard", "shard shard-\x01.dmck", "a shard is named shard-<...>.dmck"},
      // One shard per rank of the saving run.
      {"world_size", "world_size 2", "names 1 shards for world_size 2"},
  };
  for (const auto &c : cases) {
    restore();
    rewriteManifest(manifest_, [&](std::string &body) { replaceLine(body, c.key, c.line); });
    expectRefused(c.expect);
  }
  // The untouched manifest still loads.
  restore();
  int64_t step = -1;
  EXPECT_EQ(dmuon_checkpoint_load(rt, dir_.c_str(), &step), DMUON_SUCCESS) << err();
  EXPECT_EQ(step, 7);
}

TEST_F(Checkpoint, EveryKeyOnceAndTheRequiredOnesPresent) {
  const struct {
    const char *what;
    void (*edit)(std::string &);
    const char *expect;
  } cases[] = {
      {"a second step line", [](std::string &b) { b += "step 8\n"; }, "a second 'step' line"},
      {"the shard line twice", [](std::string &b) { b += lineOf(b, "shard") + "\n"; },
       "the shard is named twice"},
      {"no model fingerprint",
       [](std::string &b) {
         const std::string l = lineOf(b, "model_fingerprint") + "\n";
         b.erase(b.find(l), l.size());
       },
       "manifest has no 'model_fingerprint' line"},
      {"8 of the 9 hyper-parameters",
       [](std::string &b) {
         const std::string l = lineOf(b, "hyper_lr") + "\n";
         b.erase(b.find(l), l.size());
       },
       "manifest has 8 of the 9 hyper_* lines"},
      {"a version-1 five without Muon's lr but with SOAP's",
       [](std::string &b) {
         for (const char *key : {"hyper_lr", "hyper_soap_weight_decay", "hyper_shampoo_lr",
                                 "hyper_shampoo_weight_decay"}) {
           const std::string l = lineOf(b, key) + "\n";
           b.erase(b.find(l), l.size());
         }
       },
       "manifest has 5 of the 9 hyper_* lines"},
      {"steps_applied without steps_skipped",
       [](std::string &b) {
         const std::string l = lineOf(b, "steps_skipped") + "\n";
         b.erase(b.find(l), l.size());
       },
       "one of 'steps_applied' and 'steps_skipped'"},
      {"an unknown key", [](std::string &b) { b += "colour blue\n"; }, "unknown manifest line"},
  };
  for (const auto &c : cases) {
    restore();
    rewriteManifest(manifest_, c.edit);
    SCOPED_TRACE(c.what);
    expectRefused(c.expect);
  }
  // A runtime before SOAP's and Shampoo's rates were scheduled wrote
  // Muon's and AdamW's five alone: that loads, and keeps this run's others.
  restore();
  rewriteManifest(manifest_, [](std::string &b) {
    for (const char *key : {"hyper_soap_lr", "hyper_soap_weight_decay", "hyper_shampoo_lr",
                            "hyper_shampoo_weight_decay"}) {
      const std::string l = lineOf(b, key) + "\n";
      b.erase(b.find(l), l.size());
    }
  });
  int64_t step = -1;
  EXPECT_EQ(dmuon_checkpoint_load(rt, dir_.c_str(), &step), DMUON_SUCCESS) << err();
  EXPECT_EQ(step, 7);
  // Anything after the end line: the manifest is not what was written.
  restore();
  std::ofstream(manifest_, std::ios::binary | std::ios::app) << "step 9\n";
  expectRefused("manifest is truncated (no end line)");
}

// Opening a FIFO for reading waits for a writer: the load must refuse it at
// once. The load runs on a thread; if it blocks, opening the FIFO for writing
// releases it and the test fails.
TEST_F(Checkpoint, AFifoNamedLikeTheManifestOrAShardIsRefusedWithoutBlocking) {
  const std::string shard = dir_ + "/" + lineOf(good_, "shard").substr(6);
  for (const std::string &path : {manifest_, shard}) {
    restore();
    ASSERT_EQ(::unlink(path.c_str()), 0) << path;
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
    int64_t step = -1;
    std::promise<dmuon_status_t> done;
    std::future<dmuon_status_t> result = done.get_future();
    std::thread loader([&] { done.set_value(dmuon_checkpoint_load(rt, dir_.c_str(), &step)); });
    if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "checkpoint_load blocked on the FIFO '" << path << "'";
      int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
      ::close(fd);
    }
    loader.join();
    EXPECT_EQ(result.get(), DMUON_ERROR_IO) << path;
    EXPECT_NE(err().find("it is a FIFO, not a regular file"), std::string::npos) << err();
    EXPECT_NE(err().find(path), std::string::npos) << err();
    ::unlink(path.c_str());
    if (path == shard) { // put the shard back for the next case
      ASSERT_EQ(dmuon_checkpoint_save(rt, dir_.c_str(), 7), DMUON_SUCCESS) << err();
    }
  }
}

TEST_F(Checkpoint, ADeviceOrDirectoryNamedLikeTheManifestIsRefused) {
  ASSERT_EQ(::unlink(manifest_.c_str()), 0);
  ASSERT_EQ(::symlink("/dev/zero", manifest_.c_str()), 0);
  expectRefused("it is a character device, not a regular file", DMUON_ERROR_IO);
  ASSERT_EQ(::unlink(manifest_.c_str()), 0);
  ASSERT_EQ(::mkdir(manifest_.c_str(), 0700), 0);
  expectRefused("it is a directory, not a regular file", DMUON_ERROR_IO);
}

TEST_F(Checkpoint, AManifestOver64MiBIsRefusedUnread) {
  ASSERT_EQ(::truncate(manifest_.c_str(), int64_t(65) << 20), 0); // sparse
  expectRefused("the file is larger than 64 MiB, the limit for a checkpoint manifest",
                DMUON_ERROR_IO);
}

TEST_F(Checkpoint, ANegativeStepIsNotSaved) {
  EXPECT_EQ(dmuon_checkpoint_save(rt, dir_.c_str(), -1), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(err().find("step -1 is negative"), std::string::npos) << err();
  // The checkpoint of step 7 is still the one there.
  int64_t step = -1;
  EXPECT_EQ(dmuon_checkpoint_load(rt, dir_.c_str(), &step), DMUON_SUCCESS) << err();
  EXPECT_EQ(step, 7);
}
