#include "backends/nccl/NcclBackend.h"

#include "backends/nccl/CollectiveTimer.h"
#include "backends/nccl/CtaBudget.h"
#include "devices/cuda/CudaDeviceGuard.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dmuon::rt {

namespace {

using Clock = CollectiveTimer::Clock;

Status cudaCheck(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return Status::ok();
  return backendError(std::string(what) + " failed: " + cudaGetErrorString(e));
}

// Every communicator the runtime uses is its own: split from the host's world
// (which is used for that split only, and never aborted: it is the host's),
// nonblocking, with a bounded CTA count (CtaBudget.h). Nonblocking so that
// nothing, not even creating a communicator, waits on the host without a
// deadline: each NCCL call may return ncclInProgress, and settle() waits
// that out before anything relies on the call (a "done" event is recorded
// only after NCCL has enqueued its kernels). Any failure, a timeout or an
// asynchronous NCCL error, goes through fail(): it aborts every communicator
// of the runtime (NCCL's way to unblock the GPU) and the backend refuses all
// further work.
class NcclBackend final : public Backend {
public:
  NcclBackend(ncclComm_t hostWorld, cudaStream_t compute, int device, double timeoutSeconds)
      : hostWorld_(hostWorld), compute_(compute), device_(device), timeout_(timeoutSeconds) {}

  ~NcclBackend() override {
    CudaDeviceGuard guard(device_);
    if (!guard.status())
      return;
    // Collectives still in flight finish first (against the deadline, when
    // there is one: a timeout aborts them all); after a failure the aborted
    // kernels are gone.
    for (auto &[id, op] : pending_) {
      if (!failure_.isOk())
        break;
      if (timeout_ > 0)
        (void)pollUntilDone(id);
      else
        cudaEventSynchronize(op.done);
    }
    for (auto &[id, op] : pending_)
      destroyEvents(op);
    for (Grouped &op : grouped_)
      cudaEventDestroy(op.start);
    if (!failure_.isOk())
      abortAll();
    // A nonblocking communicator is finalized (which may be in progress)
    // before it is destroyed.
    for (ncclComm_t &c : groups_) {
      if (c && failure_.isOk() && check(ncclCommFinalize(c), "ncclCommFinalize", c))
        (void)settle(c, "ncclCommFinalize");
      if (c)
        ncclCommDestroy(c);
      c = nullptr;
    }
    for (cudaStream_t s : {broadcastStream_, reduceStream_, replicateStream_})
      if (s)
        cudaStreamDestroy(s);
    cudaFree(gatherDevice_);
    cudaFreeHost(gatherHost_);
    cudaGetLastError();
  }

  Status init() {
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    // A host world created nonblocking (PyTorch can) may still be
    // initializing: wait that out before using it.
    DMUON_RETURN_IF_ERROR(settleHostWorld());
    DMUON_RETURN_IF_ERROR(check(ncclCommUserRank(hostWorld_, &rank_), "ncclCommUserRank", hostWorld_));
    DMUON_RETURN_IF_ERROR(check(ncclCommCount(hostWorld_, &size_), "ncclCommCount", hostWorld_));
    // Shard-dim traffic (intra-node) goes first, as FSDP2 does; the
    // replicate traffic (inter-node) must not starve it.
    int least = 0, greatest = 0;
    DMUON_RETURN_IF_ERROR(cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                                    "cudaDeviceGetStreamPriorityRange"));
    DMUON_RETURN_IF_ERROR(cudaCheck(
        cudaStreamCreateWithPriority(&broadcastStream_, cudaStreamNonBlocking, greatest),
        "cudaStreamCreateWithPriority"));
    DMUON_RETURN_IF_ERROR(cudaCheck(
        cudaStreamCreateWithPriority(&reduceStream_, cudaStreamNonBlocking, greatest),
        "cudaStreamCreateWithPriority"));
    DMUON_RETURN_IF_ERROR(cudaCheck(
        cudaStreamCreateWithPriority(&replicateStream_, cudaStreamNonBlocking, 0),
        "cudaStreamCreateWithPriority"));
    int sms = 0;
    DMUON_RETURN_IF_ERROR(cudaCheck(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
        "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)"));
    budget_ = CtaBudget(sms);
    // allGather's buffers: pinned on the host, so that the copy back is
    // stream-ordered and the host waits on an event (with the deadline), not
    // inside cudaMemcpy.
    const size_t gatherBytes = sizeof(uint64_t) * (static_cast<size_t>(size_) + 1);
    DMUON_RETURN_IF_ERROR(cudaCheck(cudaMallocHost(reinterpret_cast<void **>(&gatherHost_), gatherBytes),
                                    "cudaMallocHost"));
    DMUON_RETURN_IF_ERROR(cudaCheck(cudaMalloc(reinterpret_cast<void **>(&gatherDevice_), gatherBytes),
                                    "cudaMalloc"));
    groups_.assign(4, nullptr);
    return split(hostWorld_, 0, rank_, groups_[static_cast<int>(Communicator::World)]);
  }

  int worldRank() const override { return rank_; }
  int worldSize() const override { return size_; }

  // On the reduce stream, without waiting for the compute stream (the value
  // comes from the host); the host waits for the result on an event.
  Status allGather(uint64_t value, std::vector<uint64_t> &out) override {
    DMUON_RETURN_IF_ERROR(failure_);
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    const ncclComm_t world = comm(Communicator::World);
    gatherHost_[size_] = value;
    DMUON_RETURN_IF_ERROR(cudaCheck(cudaMemcpyAsync(gatherDevice_ + size_, gatherHost_ + size_,
                                                    sizeof(uint64_t), cudaMemcpyHostToDevice,
                                                    reduceStream_),
                                    "cudaMemcpyAsync"));
    InFlight op;
    DMUON_RETURN_IF_ERROR(recordEvent(reduceStream_, op.start));
    Status s = check(ncclAllGather(gatherDevice_ + size_, gatherDevice_, 1, ncclUint64, world,
                                   reduceStream_),
                     "ncclAllGather", world);
    if (s)
      s = settle(world, "ncclAllGather");
    if (s)
      s = cudaCheck(cudaMemcpyAsync(gatherHost_, gatherDevice_, sizeof(uint64_t) * size_,
                                    cudaMemcpyDeviceToHost, reduceStream_),
                    "cudaMemcpyAsync");
    if (s)
      s = recordEvent(reduceStream_, op.done);
    if (!s) {
      destroyEvents(op);
      return fail(s);
    }
    const RequestId id = next_++;
    pending_.emplace(id, op);
    if (timeout_ > 0) {
      DMUON_RETURN_IF_ERROR(pollUntilDone(id));
    } else {
      DMUON_RETURN_IF_ERROR(cudaCheck(cudaEventSynchronize(op.done), "cudaEventSynchronize"));
    }
    destroyEvents(pending_.at(id));
    pending_.erase(id);
    out.assign(gatherHost_, gatherHost_ + size_);
    return asyncErrors();
  }

  Status createGroups(Split shard, Split replicate, Split dp) override {
    DMUON_RETURN_IF_ERROR(failure_);
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    const Split splits[] = {shard, replicate, dp};
    for (int g = 0; g < 3; ++g)
      DMUON_RETURN_IF_ERROR(
          split(comm(Communicator::World), splits[g].color, splits[g].key, groups_[g]));
    return Status::ok();
  }

  Status createGroup(Split s, Communicator &out) override {
    DMUON_RETURN_IF_ERROR(failure_);
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    // In groups_ before it exists, so that a failed split aborts it too.
    groups_.push_back(nullptr);
    DMUON_RETURN_IF_ERROR(split(comm(Communicator::World), s.color, s.key, groups_.back()));
    out = static_cast<Communicator>(groups_.size() - 1);
    return Status::ok();
  }

  // NCCL has no gather/scatter: point-to-point sends and receives in one group.
  Status gather(Communicator g, const float *send, float *recv, size_t count, int root,
                RequestId &out) override {
    const int me = groupRank(g), n = groupSize(g);
    return issue(g, reduceStream_, out, [&]() -> Status {
      DMUON_RETURN_IF_ERROR(check(ncclGroupStart(), "ncclGroupStart", comm(g)));
      Status s = Status::ok();
      if (me == root) {
        for (int p = 0; p < n && s; ++p)
          s = p == me ? cudaCheck(cudaMemcpyAsync(recv + p * count, send, count * sizeof(float),
                                                  cudaMemcpyDeviceToDevice, reduceStream_),
                                  "cudaMemcpyAsync")
                      : check(ncclRecv(recv + p * count, count, ncclFloat, p, comm(g),
                                       reduceStream_),
                              "ncclRecv", comm(g));
      } else {
        s = check(ncclSend(send, count, ncclFloat, root, comm(g), reduceStream_), "ncclSend",
                  comm(g));
      }
      Status end = check(ncclGroupEnd(), "ncclGroupEnd", comm(g));
      return s ? end : s;
    });
  }

  Status scatter(Communicator g, const float *send, float *recv, size_t count, int root,
                 RequestId &out) override {
    const int me = groupRank(g), n = groupSize(g);
    return issue(g, reduceStream_, out, [&]() -> Status {
      DMUON_RETURN_IF_ERROR(check(ncclGroupStart(), "ncclGroupStart", comm(g)));
      Status s = Status::ok();
      if (me == root) {
        for (int p = 0; p < n && s; ++p)
          s = p == me ? cudaCheck(cudaMemcpyAsync(recv, send + p * count, count * sizeof(float),
                                                  cudaMemcpyDeviceToDevice, reduceStream_),
                                  "cudaMemcpyAsync")
                      : check(ncclSend(send + p * count, count, ncclFloat, p, comm(g),
                                       reduceStream_),
                              "ncclSend", comm(g));
      } else {
        s = check(ncclRecv(recv, count, ncclFloat, root, comm(g), reduceStream_), "ncclRecv",
                  comm(g));
      }
      Status end = check(ncclGroupEnd(), "ncclGroupEnd", comm(g));
      return s ? end : s;
    });
  }

  int groupRank(Communicator g) const override {
    int r = 0;
    ncclCommUserRank(comm(g), &r);
    return r;
  }
  int groupSize(Communicator g) const override {
    int n = 0;
    ncclCommCount(comm(g), &n);
    return n;
  }

  Status broadcast(Communicator g, void *data, size_t bytes, int root, RequestId &out) override {
    cudaStream_t s = g == Communicator::Shard ? broadcastStream_
                     : g == Communicator::Replicate ? replicateStream_
                                                 : reduceStream_;
    return issue(g, s, out, [&] {
      return check(ncclBroadcast(data, data, bytes, ncclUint8, root, comm(g), s), "ncclBroadcast",
                   comm(g));
    });
  }

  Status reduceSum(Communicator g, float *data, size_t count, int root, RequestId &out) override {
    cudaStream_t s = g == Communicator::Replicate ? replicateStream_ : reduceStream_;
    return issue(g, s, out, [&] {
      return check(ncclReduce(data, data, count, ncclFloat, ncclSum, root, comm(g), s),
                   "ncclReduce", comm(g));
    });
  }

  Status allReduceSum(Communicator g, float *data, size_t count, RequestId &out) override {
    return issue(g, reduceStream_, out, [&] {
      return check(ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm(g), reduceStream_),
                   "ncclAllReduce", comm(g));
    });
  }
  Status allReduceSum(Communicator g, double *data, size_t count, RequestId &out) override {
    return issue(g, reduceStream_, out, [&] {
      return check(
          ncclAllReduce(data, data, count, ncclFloat64, ncclSum, comm(g), reduceStream_),
          "ncclAllReduce", comm(g));
    });
  }

  Status allReduceMax(Communicator g, float *data, size_t count, RequestId &out) override {
    return issue(g, reduceStream_, out, [&] {
      return check(ncclAllReduce(data, data, count, ncclFloat, ncclMax, comm(g), reduceStream_),
                   "ncclAllReduce", comm(g));
    });
  }

  // NCCL's in-place forms: the send buffer is this rank's part of the
  // receive buffer (all-gather); the sharded route's collectives run on the
  // high-priority streams, like the owner route's.
  Status allGatherInPlace(Communicator g, void *data, size_t bytesPerRank,
                          RequestId &out) override {
    return issue(g, broadcastStream_, out, [&] {
      auto *base = static_cast<uint8_t *>(data);
      return check(ncclAllGather(base + static_cast<size_t>(groupRank(g)) * bytesPerRank, base,
                                 bytesPerRank, ncclUint8, comm(g), broadcastStream_),
                   "ncclAllGather", comm(g));
    });
  }

  Status reduceScatterSum(Communicator g, const float *send, float *recv, size_t count,
                          RequestId &out) override {
    return issue(g, reduceStream_, out, [&] {
      return check(ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, comm(g), reduceStream_),
                   "ncclReduceScatter", comm(g));
    });
  }

  // The compute stream waits on the device; the host blocks only to poll
  // against the deadline when there is one.
  Status wait(RequestId id) override {
    DMUON_RETURN_IF_ERROR(failure_);
    auto it = pending_.find(id);
    if (it == pending_.end())
      return Status::ok();
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    if (timeout_ > 0)
      DMUON_RETURN_IF_ERROR(pollUntilDone(id));
    Status s = cudaCheck(cudaStreamWaitEvent(compute_, it->second.done, 0), "cudaStreamWaitEvent");
    destroyEvents(it->second);
    pending_.erase(it);
    if (!s)
      return s;
    return asyncErrors();
  }

  void setTimeout(double seconds) override { timeout_ = seconds; }

  Status beginGroup() override {
    DMUON_RETURN_IF_ERROR(failure_);
    DMUON_RETURN_IF_ERROR(check(ncclGroupStart(), "ncclGroupStart", nullptr));
    ++groupDepth_;
    return Status::ok();
  }

  // The group's collectives are enqueued here (for nonblocking
  // communicators, once each has settled); only then can their completion
  // events be recorded.
  Status endGroup() override {
    if (groupDepth_ == 0)
      return Status::ok();
    --groupDepth_;
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    Status s = check(ncclGroupEnd(), "ncclGroupEnd", nullptr);
    if (groupDepth_ > 0)
      return s;
    if (!failure_.isOk()) { // a failure inside the group: abort now
      for (Grouped &op : grouped_)
        cudaEventDestroy(op.start);
      grouped_.clear();
      abortAll();
      return failure_;
    }
    std::vector<Grouped> ops = std::move(grouped_);
    grouped_.clear();
    for (size_t i = 0; i < ops.size() && s; ++i)
      s = settle(ops[i].comm, "ncclGroupEnd");
    for (Grouped &op : ops) {
      InFlight f{op.start, nullptr, {}};
      if (s)
        s = recordEvent(op.stream, f.done);
      if (s)
        pending_.emplace(op.id, f);
      else
        destroyEvents(f);
    }
    return s ? s : fail(s);
  }

private:
  struct InFlight {
    cudaEvent_t start = nullptr; // on the collective's stream, just before its launch
    cudaEvent_t done = nullptr;  // just after it
    CollectiveTimer timer;
  };
  struct Grouped {
    RequestId id;
    cudaStream_t stream;
    ncclComm_t comm;
    cudaEvent_t start;
  };

  // Aborts every communicator of the runtime and keeps `reason` as the answer
  // to every later call. Inside a collective group the abort waits for
  // endGroup: the group's queued operations still point at the communicators.
  Status fail(Status reason) {
    if (failure_.isOk())
      failure_ = backendError(reason.message() + " (rank " + std::to_string(rank_) +
                              "); the runtime's NCCL communicators were aborted and the runtime "
                              "must be destroyed");
    if (groupDepth_ == 0)
      abortAll();
    return failure_;
  }

  void abortAll() {
    for (ncclComm_t &c : groups_)
      if (c) {
        ncclCommAbort(c);
        c = nullptr;
      }
  }

  Status timedOut(const std::string &what) {
    return fail(backendError("timed out after " + formatNumber(timeout_) + " s waiting for " + what));
  }

  // Waits out ncclInProgress on one of the runtime's communicators (a split
  // being created, a nonblocking enqueue), against the deadline.
  Status settle(ncclComm_t c, const char *what) {
    CollectiveTimer timer;
    Backoff backoff;
    while (true) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(c, &state);
      if (r != ncclSuccess)
        return fail(check(r, "ncclCommGetAsyncError", c));
      if (state == ncclSuccess)
        return Status::ok();
      if (state != ncclInProgress)
        return fail(check(state, what, c));
      if (timer.expired(CollectiveProgress::Running, Clock::now(), timeout_))
        return timedOut(std::string(what) + " to complete");
      backoff.pause();
    }
  }

  // The host's world: waited out the same way, but never aborted.
  Status settleHostWorld() {
    CollectiveTimer timer;
    Backoff backoff;
    while (true) {
      ncclResult_t state = ncclSuccess;
      DMUON_RETURN_IF_ERROR(check(ncclCommGetAsyncError(hostWorld_, &state),
                                  "ncclCommGetAsyncError", hostWorld_));
      if (state == ncclSuccess)
        return Status::ok();
      if (state != ncclInProgress)
        return check(state, "the host's NCCL communicator", hostWorld_);
      if (timer.expired(CollectiveProgress::Running, Clock::now(), timeout_))
        return backendError("timed out after " + formatNumber(timeout_) +
                            " s waiting for the host's nonblocking NCCL communicator to be ready");
      backoff.pause();
    }
  }

  Status split(ncclComm_t parent, int color, int key, ncclComm_t &out) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.minCTAs = 1;
    config.maxCTAs = budget_.next();
    ncclComm_t c = nullptr;
    DMUON_RETURN_IF_ERROR(check(ncclCommSplit(parent, color, key, &c, &config), "ncclCommSplit", parent));
    if (!c)
      return fail(backendError("ncclCommSplit returned no communicator"));
    out = c; // owned (and aborted by fail) from here on
    return settle(c, "ncclCommSplit");
  }

  // Polls every collective issued up to `id` until `id` is done: any of them
  // that has run past the deadline (its clock started on the device, see
  // CollectiveTimer.h) fails the backend, and so does any asynchronous NCCL
  // error.
  Status pollUntilDone(RequestId id) {
    InFlight &target = pending_.at(id);
    Backoff backoff;
    while (true) {
      const cudaError_t q = cudaEventQuery(target.done);
      if (q == cudaSuccess)
        return asyncErrors();
      if (q != cudaErrorNotReady)
        return fail(cudaCheck(q, "cudaEventQuery"));
      DMUON_RETURN_IF_ERROR(asyncErrors());
      const Clock::time_point now = Clock::now();
      for (auto &[rid, op] : pending_) {
        if (rid > id)
          break;
        if (op.timer.expired(progress(op), now, timeout_))
          return timedOut("a collective on rank " + std::to_string(rank_) +
                          " that started on the device and did not finish");
      }
      backoff.pause();
    }
  }

  static CollectiveProgress progress(const InFlight &op) {
    if (cudaEventQuery(op.done) == cudaSuccess)
      return CollectiveProgress::Finished;
    return cudaEventQuery(op.start) == cudaSuccess ? CollectiveProgress::Running
                                                   : CollectiveProgress::Queued;
  }

  static Status recordEvent(cudaStream_t s, cudaEvent_t &ev) {
    DMUON_RETURN_IF_ERROR(
        cudaCheck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"));
    Status st = cudaCheck(cudaEventRecord(ev, s), "cudaEventRecord");
    if (!st) {
      cudaEventDestroy(ev);
      ev = nullptr;
    }
    return st;
  }

  static void destroyEvents(InFlight &op) {
    if (op.start)
      cudaEventDestroy(op.start);
    if (op.done)
      cudaEventDestroy(op.done);
    op.start = op.done = nullptr;
  }

  ncclComm_t comm(Communicator g) const { return groups_[static_cast<size_t>(g)]; }

  // ncclInProgress is accepted here: the caller settles the communicator
  // before relying on the call.
  static Status check(ncclResult_t r, const char *what, ncclComm_t c) {
    if (r == ncclSuccess || r == ncclInProgress)
      return Status::ok();
    std::string msg = std::string(what) + " failed: " + ncclGetErrorString(r);
    const char *last = ncclGetLastError(c);
    if (last && *last)
      msg += std::string(" (") + last + ")";
    return backendError(msg);
  }

  // NCCL reports failures of enqueued work (a peer died, a network error)
  // asynchronously; any of them takes the timeout's path.
  Status asyncErrors() {
    DMUON_RETURN_IF_ERROR(failure_);
    for (ncclComm_t c : groups_) {
      if (!c)
        continue;
      ncclResult_t async = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(c, &async);
      if (r != ncclSuccess)
        return fail(check(r, "ncclCommGetAsyncError", c));
      if (async != ncclSuccess && async != ncclInProgress)
        return fail(check(async, "an asynchronous NCCL operation", c));
    }
    return Status::ok();
  }

  // The collective's stream first waits for the data the compute stream
  // produced; the start event marks where the collective can run (its
  // timeout clock starts there), the done event after it is the request the
  // executor waits on.
  template <typename F>
  Status issue(Communicator g, cudaStream_t s, RequestId &out, F &&launch) {
    DMUON_RETURN_IF_ERROR(failure_);
    DMUON_CUDA_DEVICE_SCOPE(guard, device_);
    cudaEvent_t ready = nullptr;
    DMUON_RETURN_IF_ERROR(recordEvent(compute_, ready));
    Status st = cudaCheck(cudaStreamWaitEvent(s, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);
    DMUON_RETURN_IF_ERROR(st);
    InFlight op;
    DMUON_RETURN_IF_ERROR(recordEvent(s, op.start));
    st = launch();
    if (!st) {
      destroyEvents(op);
      return fail(st);
    }
    out = next_++;
    if (groupDepth_ > 0) {
      grouped_.push_back({out, s, comm(g), op.start});
      return Status::ok();
    }
    st = settle(comm(g), "an NCCL collective to be enqueued");
    if (st)
      st = recordEvent(s, op.done);
    if (!st) {
      destroyEvents(op);
      return fail(st);
    }
    pending_.emplace(out, op);
    return Status::ok();
  }

  ncclComm_t hostWorld_;
  cudaStream_t compute_;
  int device_;
  double timeout_;
  int rank_ = 0, size_ = 1;
  std::vector<ncclComm_t> groups_; // indexed by Communicator; all the runtime's own
  cudaStream_t broadcastStream_ = nullptr, reduceStream_ = nullptr, replicateStream_ = nullptr;
  CtaBudget budget_{1};
  uint64_t *gatherHost_ = nullptr, *gatherDevice_ = nullptr;
  RequestId next_ = 1;
  std::map<RequestId, InFlight> pending_; // in issue order
  int groupDepth_ = 0;
  Status failure_;
  std::vector<Grouped> grouped_;
};

} // namespace

Status createNcclBackend(void *communicator, void *stream, int device, double timeoutSeconds,
                         std::unique_ptr<Backend> &out) {
  auto backend = std::make_unique<NcclBackend>(*static_cast<ncclComm_t *>(communicator),
                                               static_cast<cudaStream_t>(stream), device,
                                               timeoutSeconds);
  DMUON_RETURN_IF_ERROR(backend->init());
  out = std::move(backend);
  return Status::ok();
}

} // namespace dmuon::rt
