#include "backends/nccl/NcclBackend.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dmuon::rt {

namespace {

Status cudaCheck(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return Status::ok();
  return backendError(std::string(what) + " failed: " + cudaGetErrorString(e));
}

class NcclBackend final : public Backend {
public:
  NcclBackend(ncclComm_t world, cudaStream_t compute, int device)
      : world_(world), compute_(compute), device_(device) {}

  ~NcclBackend() override {
    cudaSetDevice(device_);
    for (auto &[id, ev] : pending_) {
      if (!aborted_)
        cudaEventSynchronize(ev);
      cudaEventDestroy(ev);
    }
    for (ncclComm_t &c : groups_)
      if (c && c != world_)
        ncclCommDestroy(c);
    for (cudaStream_t s : {broadcastStream_, reduceStream_, replicateStream_})
      if (s)
        cudaStreamDestroy(s);
  }

  Status init() {
    DMUON_RETURN_IF_ERROR(cudaCheck(cudaSetDevice(device_), "cudaSetDevice"));
    DMUON_RETURN_IF_ERROR(check(ncclCommUserRank(world_, &rank_), "ncclCommUserRank", world_));
    DMUON_RETURN_IF_ERROR(check(ncclCommCount(world_, &size_), "ncclCommCount", world_));
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
    return Status::ok();
  }

  int worldRank() const override { return rank_; }
  int worldSize() const override { return size_; }

  Status allGather(uint64_t value, std::vector<uint64_t> &out) override {
    out.assign(size_, 0);
    uint64_t *dev = nullptr;
    DMUON_RETURN_IF_ERROR(cudaCheck(cudaMallocAsync(reinterpret_cast<void **>(&dev),
                                                    sizeof(uint64_t) * (size_ + 1), compute_),
                                    "cudaMallocAsync"));
    Status s = cudaCheck(cudaMemcpyAsync(dev + size_, &value, sizeof value,
                                         cudaMemcpyHostToDevice, compute_),
                         "cudaMemcpyAsync");
    if (s)
      s = check(ncclAllGather(dev + size_, dev, 1, ncclUint64, world_, compute_),
                "ncclAllGather", world_);
    if (s)
      s = cudaCheck(cudaMemcpyAsync(out.data(), dev, sizeof(uint64_t) * size_,
                                    cudaMemcpyDeviceToHost, compute_),
                    "cudaMemcpyAsync");
    cudaFreeAsync(dev, compute_);
    if (s)
      s = cudaCheck(cudaStreamSynchronize(compute_), "cudaStreamSynchronize");
    return s;
  }

  Status createGroups(Split shard, Split replicate, Split dp) override {
    groups_.assign(4, nullptr);
    groups_[static_cast<int>(CommGroup::World)] = world_;
    const Split splits[] = {shard, replicate, dp};
    for (int g = 0; g < 3; ++g)
      DMUON_RETURN_IF_ERROR(check(
          ncclCommSplit(world_, splits[g].color, splits[g].key, &groups_[g], nullptr),
          "ncclCommSplit", world_));
    return Status::ok();
  }

  Status createGroup(Split split, CommGroup &out) override {
    ncclComm_t c = nullptr;
    DMUON_RETURN_IF_ERROR(
        check(ncclCommSplit(world_, split.color, split.key, &c, nullptr), "ncclCommSplit", world_));
    out = static_cast<CommGroup>(groups_.size());
    groups_.push_back(c);
    return Status::ok();
  }

  // NCCL has no gather/scatter: point-to-point sends and receives in one group.
  Status gather(CommGroup g, const float *send, float *recv, size_t count, int root,
                RequestId &out) override {
    const int me = groupRank(g), n = groupSize(g);
    return issue(reduceStream_, out, [&]() -> Status {
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

  Status scatter(CommGroup g, const float *send, float *recv, size_t count, int root,
                 RequestId &out) override {
    const int me = groupRank(g), n = groupSize(g);
    return issue(reduceStream_, out, [&]() -> Status {
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

  int groupRank(CommGroup g) const override {
    int r = 0;
    ncclCommUserRank(comm(g), &r);
    return r;
  }
  int groupSize(CommGroup g) const override {
    int n = 0;
    ncclCommCount(comm(g), &n);
    return n;
  }

  Status broadcast(CommGroup g, void *data, size_t bytes, int root, RequestId &out) override {
    cudaStream_t s = g == CommGroup::Shard ? broadcastStream_
                     : g == CommGroup::Replicate ? replicateStream_
                                                 : reduceStream_;
    return issue(s, out, [&] {
      return check(ncclBroadcast(data, data, bytes, ncclUint8, root, comm(g), s), "ncclBroadcast",
                   comm(g));
    });
  }

  Status reduceSum(CommGroup g, float *data, size_t count, int root, RequestId &out) override {
    cudaStream_t s = g == CommGroup::Replicate ? replicateStream_ : reduceStream_;
    return issue(s, out, [&] {
      return check(ncclReduce(data, data, count, ncclFloat, ncclSum, root, comm(g), s),
                   "ncclReduce", comm(g));
    });
  }

  Status allReduceSum(CommGroup g, float *data, size_t count, RequestId &out) override {
    return issue(reduceStream_, out, [&] {
      return check(ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm(g), reduceStream_),
                   "ncclAllReduce", comm(g));
    });
  }
  Status allReduceSum(CommGroup g, double *data, size_t count, RequestId &out) override {
    return issue(reduceStream_, out, [&] {
      return check(
          ncclAllReduce(data, data, count, ncclFloat64, ncclSum, comm(g), reduceStream_),
          "ncclAllReduce", comm(g));
    });
  }

  Status allReduceMax(CommGroup g, float *data, size_t count, RequestId &out) override {
    return issue(reduceStream_, out, [&] {
      return check(ncclAllReduce(data, data, count, ncclFloat, ncclMax, comm(g), reduceStream_),
                   "ncclAllReduce", comm(g));
    });
  }

  // NCCL's in-place forms: the send buffer is this rank's part of the
  // receive buffer (all-gather); the sharded route's collectives run on the
  // high-priority streams, like the owner route's.
  Status allGatherInPlace(CommGroup g, void *data, size_t bytesPerRank,
                          RequestId &out) override {
    return issue(broadcastStream_, out, [&] {
      auto *base = static_cast<uint8_t *>(data);
      return check(ncclAllGather(base + static_cast<size_t>(groupRank(g)) * bytesPerRank, base,
                                 bytesPerRank, ncclUint8, comm(g), broadcastStream_),
                   "ncclAllGather", comm(g));
    });
  }

  Status reduceScatterSum(CommGroup g, const float *send, float *recv, size_t count,
                          RequestId &out) override {
    return issue(reduceStream_, out, [&] {
      return check(ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, comm(g), reduceStream_),
                   "ncclReduceScatter", comm(g));
    });
  }

  // The compute stream waits on the device; the host never blocks here.
  Status wait(RequestId id) override {
    DMUON_RETURN_IF_ERROR(failure_);
    auto it = pending_.find(id);
    if (it == pending_.end())
      return Status::ok();
    cudaEvent_t ev = it->second;
    if (timeout_ > 0)
      DMUON_RETURN_IF_ERROR(pollUntilDone(ev));
    pending_.erase(it);
    Status s = cudaCheck(cudaStreamWaitEvent(compute_, ev, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ev);
    if (!s)
      return s;
    return asyncErrors();
  }

  void setTimeout(double seconds) override { timeout_ = seconds; }

  Status beginGroup() override {
    DMUON_RETURN_IF_ERROR(check(ncclGroupStart(), "ncclGroupStart", world_));
    ++groupDepth_;
    return Status::ok();
  }

  // The group's collectives launch here; only now can their completion
  // events be recorded.
  Status endGroup() override {
    if (groupDepth_ == 0)
      return Status::ok();
    --groupDepth_;
    DMUON_RETURN_IF_ERROR(check(ncclGroupEnd(), "ncclGroupEnd", world_));
    if (groupDepth_ > 0)
      return Status::ok();
    std::vector<std::pair<RequestId, cudaStream_t>> ops = std::move(grouped_);
    grouped_.clear();
    for (auto &[id, s] : ops)
      DMUON_RETURN_IF_ERROR(recordDone(id, s));
    return Status::ok();
  }

private:
  // With a timeout the host polls the collective's event; a collective that
  // does not finish in time aborts every communicator (NCCL's way to unblock
  // the GPU) and the backend refuses further work.
  Status pollUntilDone(cudaEvent_t ev) {
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      cudaError_t q = cudaEventQuery(ev);
      if (q == cudaSuccess)
        return asyncErrors();
      if (q != cudaErrorNotReady)
        return cudaCheck(q, "cudaEventQuery");
      DMUON_RETURN_IF_ERROR(asyncErrors());
      std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
      if (waited.count() > timeout_) {
        for (ncclComm_t &c : groups_)
          if (c && c != world_) {
            ncclCommAbort(c);
            c = nullptr;
          }
        aborted_ = true;
        failure_ = backendError("timed out after " + formatNumber(timeout_) +
                                " s waiting for a collective on rank " + std::to_string(rank_) +
                                "; the runtime's NCCL communicators were aborted and the "
                                "runtime must be destroyed");
        return failure_;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  Status recordDone(RequestId id, cudaStream_t s) {
    cudaEvent_t done = nullptr;
    DMUON_RETURN_IF_ERROR(cudaCheck(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                                    "cudaEventCreate"));
    Status st = cudaCheck(cudaEventRecord(done, s), "cudaEventRecord");
    if (!st) {
      cudaEventDestroy(done);
      return st;
    }
    pending_.emplace(id, done);
    return Status::ok();
  }

  ncclComm_t comm(CommGroup g) const { return groups_[static_cast<size_t>(g)]; }

  Status check(ncclResult_t r, const char *what, ncclComm_t c) const {
    if (r == ncclSuccess || r == ncclInProgress)
      return Status::ok();
    std::string msg = std::string(what) + " failed: " + ncclGetErrorString(r);
    const char *last = ncclGetLastError(c);
    if (last && *last)
      msg += std::string(" (") + last + ")";
    return backendError(msg);
  }

  // NCCL reports failures of enqueued work (a peer died, a network error)
  // asynchronously; surface them as statuses instead of hanging or aborting.
  Status asyncErrors() const {
    for (ncclComm_t c : groups_) {
      if (!c)
        continue;
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(c, &async);
      DMUON_RETURN_IF_ERROR(check(r, "ncclCommGetAsyncError", c));
      DMUON_RETURN_IF_ERROR(check(async, "an asynchronous NCCL operation", c));
    }
    return Status::ok();
  }

  // The collective's stream first waits for the data the compute stream
  // produced; an event after it is the request the executor waits on.
  template <typename F> Status issue(cudaStream_t s, RequestId &out, F &&launch) {
    DMUON_RETURN_IF_ERROR(failure_);
    cudaEvent_t ready = nullptr;
    DMUON_RETURN_IF_ERROR(cudaCheck(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
                                    "cudaEventCreate"));
    Status st = cudaCheck(cudaEventRecord(ready, compute_), "cudaEventRecord");
    if (st)
      st = cudaCheck(cudaStreamWaitEvent(s, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);
    DMUON_RETURN_IF_ERROR(st);
    DMUON_RETURN_IF_ERROR(launch());
    out = next_++;
    if (groupDepth_ > 0) {
      grouped_.emplace_back(out, s);
      return Status::ok();
    }
    return recordDone(out, s);
  }

  ncclComm_t world_;
  cudaStream_t compute_;
  int device_;
  int rank_ = 0, size_ = 1;
  std::vector<ncclComm_t> groups_; // indexed by CommGroup; World is the host's
  cudaStream_t broadcastStream_ = nullptr, reduceStream_ = nullptr, replicateStream_ = nullptr;
  RequestId next_ = 1;
  std::unordered_map<RequestId, cudaEvent_t> pending_;
  int groupDepth_ = 0;
  double timeout_ = 0;
  bool aborted_ = false;
  Status failure_;
  std::vector<std::pair<RequestId, cudaStream_t>> grouped_;
};

} // namespace

Status createNcclBackend(void *communicator, void *stream, int device,
                         std::unique_ptr<Backend> &out) {
  if (!communicator)
    return invalidArgument("options.communicator is null; pass a pointer to an ncclComm_t");
  if (!stream)
    return invalidArgument("options.stream is null; pass the host's compute cudaStream_t");
  auto backend = std::make_unique<NcclBackend>(*static_cast<ncclComm_t *>(communicator),
                                               static_cast<cudaStream_t>(stream), device);
  DMUON_RETURN_IF_ERROR(backend->init());
  out = std::move(backend);
  return Status::ok();
}

} // namespace dmuon::rt
