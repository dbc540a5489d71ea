// The timeout clock of one in-flight NCCL operation, and how often the host
// looks at it, apart from CUDA and NCCL so that the rules are unit-tested on
// the CPU (test/unit/GpuHostLogicTest.cpp).
//
// A collective is issued on its own stream behind an event of the compute
// stream, so it may sit queued behind a long layer before it can start. Its
// clock starts when the host first sees the stream reach it (an event
// recorded just before the NCCL launch), not when the host starts waiting:
// compute time never counts against the timeout, and a collective that
// started and does not finish (a missing or stuck peer) times out however
// late the host waits for it.
#ifndef DMUON_RUNTIME_BACKENDS_NCCL_COLLECTIVETIMER_H
#define DMUON_RUNTIME_BACKENDS_NCCL_COLLECTIVETIMER_H

#include <chrono>
#include <optional>
#include <thread>

namespace dmuon::rt {

// What the host sees of an operation: still queued behind earlier work on
// its stream, running (its start event passed; for a communicator being
// created or an enqueue NCCL reports in progress: from the first look), or
// finished.
enum class CollectiveProgress { Queued, Running, Finished };

class CollectiveTimer {
public:
  using Clock = std::chrono::steady_clock;

  // One observation at `now`. True when the operation has been running for
  // longer than `timeoutSeconds` since it was first seen running; never with
  // a timeout of 0 (wait forever) or once it has finished.
  bool expired(CollectiveProgress progress, Clock::time_point now, double timeoutSeconds) {
    if (progress == CollectiveProgress::Finished)
      return false;
    if (progress == CollectiveProgress::Running && !startedAt_)
      startedAt_ = now;
    if (timeoutSeconds <= 0 || !startedAt_)
      return false;
    return std::chrono::duration<double>(now - *startedAt_).count() > timeoutSeconds;
  }

  bool started() const { return startedAt_.has_value(); }

private:
  std::optional<Clock::time_point> startedAt_;
};

// How often the host looks at an operation it waits for: at once at first
// (an enqueue, a split or a small collective settles in microseconds, and
// every collective on a nonblocking communicator is waited out once), then
// every 100 us.
class Backoff {
public:
  void pause() {
    if (yields_ < kYields) {
      ++yields_;
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

private:
  static constexpr int kYields = 1000;
  int yields_ = 0;
};

} // namespace dmuon::rt

#endif
