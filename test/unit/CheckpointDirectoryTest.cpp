// Checkpoint directories shared by more than one save, on loopback ranks: a
// shard copied in from another save of the same run is refused, naming it,
// and two runs saving into one directory at once never leave a manifest that
// names a missing or foreign shard (one of them is refused instead).
#include "LoopbackSupport.h"
#include "LoopbackValues.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

using namespace dmuon::rt;
namespace fs = std::filesystem;

namespace {

std::string tempDir() {
  char dir[] = "/tmp/dmuon-ckpt-dir-XXXXXX";
  EXPECT_NE(::mkdtemp(dir), nullptr);
  return dir;
}

// The shard names a manifest lists, in rank order.
std::vector<std::string> shardsOf(const std::string &dir) {
  std::ifstream in(dir + "/checkpoint");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("shard ", 0) == 0)
      out.push_back(line.substr(6));
  return out;
}

} // namespace

TEST(CheckpointDirectory, AShardCopiedFromALaterSaveIsRefusedNamingIt) {
  std::unique_ptr<LoadedPlan> plan = loadPlan(tinyPlan("3"));
  ASSERT_TRUE(plan);
  const std::string base = tempDir(), early = base + "/early", late = base + "/late";
  dmuon::rt::Run first;
  first.steps = 1;
  first.saveTo = early;
  trainWith(*plan, first, valueOf);
  dmuon::rt::Run second;
  second.steps = 1;
  second.firstStep = 1;
  second.resumeFrom = early;
  second.saveTo = late;
  trainWith(*plan, second, valueOf);
  const std::vector<std::string> earlyShards = shardsOf(early), lateShards = shardsOf(late);
  ASSERT_EQ(earlyShards.size(), 3u);
  ASSERT_EQ(lateShards.size(), 3u);
  // Rank 1's shard of step 2, under the name of rank 1's shard of step 1.
  const std::string mixed = early + "/" + earlyShards[1];
  fs::copy_file(late + "/" + lateShards[1], mixed, fs::copy_options::overwrite_existing);
  runWorld(*plan, [&](int rank, Executor &ex) {
    bindAll(*plan, ex, valueOf);
    int64_t step = -1;
    Status s = ex.loadCheckpoint(early, &step);
    EXPECT_FALSE(s) << "rank " << rank << " loaded a checkpoint with a shard of another save";
    EXPECT_EQ(step, -1);
    EXPECT_NE(s.message().find("'" + mixed + "'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("step 2"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("step 1"), std::string::npos) << s.message();
  });
  // The untouched later checkpoint still loads.
  runWorld(*plan, [&](int rank, Executor &ex) {
    bindAll(*plan, ex, valueOf);
    int64_t step = -1;
    Status s = ex.loadCheckpoint(late, &step);
    EXPECT_TRUE(s) << "rank " << rank << ": " << s.message();
    EXPECT_EQ(step, 2);
  });
  fs::remove_all(base);
}

// Two 3-rank runs save into one directory, over and over, each loading the
// directory after every save that succeeded. A save may be refused while
// the other holds the directory, and a load while a save is under way, but
// nothing else: a save that succeeds has left a checkpoint that loads.
TEST(CheckpointDirectory, TwoRunsSavingIntoOneDirectoryNeverBreakIt) {
  std::unique_ptr<LoadedPlan> plan = loadPlan(tinyPlan("3"));
  ASSERT_TRUE(plan);
  const std::string dir = tempDir();
  constexpr int kWanted = 6, kMaxTries = 2000;
  struct Outcome {
    int saved = 0, tries = 0, busy = 0;
    std::vector<std::string> failures;
  };
  Outcome outcomes[2];
  std::atomic<int> bound{0}; // ranks ready to save: all six start together
  auto busy = [](const Status &s) {
    return s.message().find("in use by another checkpoint save") != std::string::npos;
  };
  std::vector<std::thread> runs;
  for (int run = 0; run < 2; ++run)
    runs.emplace_back([&, run] {
      runWorld(*plan, [&](int rank, Executor &ex) {
        bindAll(*plan, ex, valueOf);
        ++bound;
        while (bound < 2 * plan->worldSize())
          std::this_thread::yield();
        Outcome mine;
        // Every rank sees the same outcomes, so all make the same calls.
        while (mine.saved < kWanted && mine.tries < kMaxTries) {
          const int64_t step = 1000 * (run + 1) + mine.tries++;
          Status s = ex.saveCheckpoint(dir, step);
          if (!s) {
            if (busy(s)) {
              ++mine.busy; // let the other run finish its save
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
            } else {
              mine.failures.push_back("save of step " + std::to_string(step) + ": " + s.message());
            }
            continue;
          }
          ++mine.saved;
          int64_t loaded = -1;
          Status l = ex.loadCheckpoint(dir, &loaded);
          if (!l && !busy(l))
            mine.failures.push_back("load after the save of step " + std::to_string(step) + ": " +
                                    l.message());
        }
        if (rank == 0)
          outcomes[run] = mine;
      });
    });
  for (std::thread &t : runs)
    t.join();
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    const Outcome &o = outcomes[run];
    for (const std::string &f : o.failures)
      ADD_FAILURE() << f;
    EXPECT_EQ(o.saved, kWanted) << o.tries << " tries, " << o.busy << " refused as busy";
  }
  // What is left loads, and names only shards that are there.
  const std::vector<std::string> shards = shardsOf(dir);
  ASSERT_EQ(shards.size(), 3u);
  for (const std::string &s : shards)
    EXPECT_TRUE(fs::is_regular_file(dir + "/" + s)) << s;
  runWorld(*plan, [&](int rank, Executor &ex) {
    bindAll(*plan, ex, valueOf);
    Status s = ex.loadCheckpoint(dir, nullptr);
    EXPECT_TRUE(s) << "rank " << rank << ": " << s.message();
  });
  fs::remove_all(dir);
}
