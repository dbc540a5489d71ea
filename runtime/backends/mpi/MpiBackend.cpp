#include "backends/mpi/MpiBackend.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <memory>
#include <thread>
#include <string>
#include <unordered_map>

namespace dmuon::rt {

namespace {

std::string mpiMessage(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

Status check(int code, const char *what) {
  if (code == MPI_SUCCESS)
    return Status::ok();
  return backendError(std::string(what) + " failed: " + mpiMessage(code));
}

// MPI counts are int: larger payloads go as several collectives.
constexpr size_t kMaxChunk = INT_MAX / 8 * 8;

class MpiBackend final : public Backend {
public:
  explicit MpiBackend(MPI_Comm world) : world_(world) {}
  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      return; // the host finalized MPI first; nothing can be freed any more
    if (!failure_.isOk()) {
      // Collectives still in flight after a timeout: leave them be, and
      // their buffers with them (a late peer's message may still land).
      for (auto &[id, buffer] : gatherBuffers_)
        (void)buffer.release();
      return;
    }
    for (auto &[id, reqs] : pending_)
      for (MPI_Request &r : reqs)
        if (r != MPI_REQUEST_NULL)
          MPI_Wait(&r, MPI_STATUS_IGNORE);
    for (size_t g = 0; g < groups_.size(); ++g)
      if (g != static_cast<size_t>(Communicator::World) && groups_[g] != MPI_COMM_NULL)
        MPI_Comm_free(&groups_[g]);
    if (dup_ != MPI_COMM_NULL)
      MPI_Comm_free(&dup_);
  }

  Status init() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      return invalidArgument("MPI is already finalized");
    // Our own duplicate keeps our traffic apart from the host's and lets us
    // ask for errors as return codes without touching the host's handler.
    DMUON_RETURN_IF_ERROR(check(MPI_Comm_dup(world_, &dup_), "MPI_Comm_dup"));
    MPI_Comm_set_errhandler(dup_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(dup_, &rank_);
    MPI_Comm_size(dup_, &size_);
    groups_.assign(4, MPI_COMM_NULL);
    groups_[static_cast<int>(Communicator::World)] = dup_;
    return Status::ok();
  }

  int worldRank() const override { return rank_; }
  int worldSize() const override { return size_; }

  // Nonblocking and waited like every other collective, so that the
  // agreements (create, set_hyper_params, checkpoints) honour the deadline.
  // The buffers are the backend's: after a timeout the request stays in
  // flight, and a late peer may still complete it.
  Status allGather(uint64_t value, std::vector<uint64_t> &out) override {
    DMUON_RETURN_IF_ERROR(failure_);
    auto buffer = std::make_unique<unsigned long long[]>(static_cast<size_t>(size_) + 1);
    buffer[size_] = value;
    MPI_Request r;
    DMUON_RETURN_IF_ERROR(check(MPI_Iallgather(buffer.get() + size_, 1, MPI_UNSIGNED_LONG_LONG,
                                               buffer.get(), 1, MPI_UNSIGNED_LONG_LONG, dup_, &r),
                                "MPI_Iallgather"));
    const RequestId id = track({r});
    unsigned long long *values = buffer.get();
    gatherBuffers_.emplace(id, std::move(buffer));
    DMUON_RETURN_IF_ERROR(wait(id));
    out.assign(values, values + size_);
    gatherBuffers_.erase(id);
    return Status::ok();
  }

  Status createGroups(Split shard, Split replicate, Split dp) override {
    const Split splits[] = {shard, replicate, dp};
    for (int g = 0; g < 3; ++g) {
      DMUON_RETURN_IF_ERROR(check(
          MPI_Comm_split(dup_, splits[g].color, splits[g].key, &groups_[g]), "MPI_Comm_split"));
      MPI_Comm_set_errhandler(groups_[g], MPI_ERRORS_RETURN);
    }
    return Status::ok();
  }

  Status createGroup(Split split, Communicator &out) override {
    MPI_Comm c;
    DMUON_RETURN_IF_ERROR(
        check(MPI_Comm_split(dup_, split.color, split.key, &c), "MPI_Comm_split"));
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    out = static_cast<Communicator>(groups_.size());
    groups_.push_back(c);
    return Status::ok();
  }

  Status gather(Communicator g, const float *send, float *recv, size_t count, int root,
                RequestId &out) override {
    DMUON_RETURN_IF_ERROR(failure_);
    if (count > static_cast<size_t>(INT_MAX))
      return unsupported("gather of " + std::to_string(count) + " floats exceeds MPI's int count");
    MPI_Request r;
    DMUON_RETURN_IF_ERROR(check(MPI_Igather(send, static_cast<int>(count), MPI_FLOAT, recv,
                                            static_cast<int>(count), MPI_FLOAT, root, comm(g), &r),
                                "MPI_Igather"));
    out = track({r});
    return Status::ok();
  }

  Status scatter(Communicator g, const float *send, float *recv, size_t count, int root,
                 RequestId &out) override {
    DMUON_RETURN_IF_ERROR(failure_);
    if (count > static_cast<size_t>(INT_MAX))
      return unsupported("scatter of " + std::to_string(count) +
                         " floats exceeds MPI's int count");
    MPI_Request r;
    DMUON_RETURN_IF_ERROR(check(MPI_Iscatter(send, static_cast<int>(count), MPI_FLOAT, recv,
                                             static_cast<int>(count), MPI_FLOAT, root, comm(g),
                                             &r),
                                "MPI_Iscatter"));
    out = track({r});
    return Status::ok();
  }

  Status allGatherInPlace(Communicator g, void *data, size_t bytesPerRank,
                          RequestId &out) override {
    DMUON_RETURN_IF_ERROR(failure_);
    if (bytesPerRank > static_cast<size_t>(INT_MAX))
      return unsupported("all-gather of " + std::to_string(bytesPerRank) +
                         " bytes per rank exceeds MPI's int count");
    MPI_Request r;
    DMUON_RETURN_IF_ERROR(check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, data,
                                               static_cast<int>(bytesPerRank), MPI_BYTE, comm(g),
                                               &r),
                                "MPI_Iallgather"));
    out = track({r});
    return Status::ok();
  }

  Status reduceScatterSum(Communicator g, const float *send, float *recv, size_t count,
                          RequestId &out) override {
    DMUON_RETURN_IF_ERROR(failure_);
    if (count > static_cast<size_t>(INT_MAX))
      return unsupported("reduce-scatter of " + std::to_string(count) +
                         " floats per rank exceeds MPI's int count");
    MPI_Request r;
    DMUON_RETURN_IF_ERROR(check(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count),
                                                          MPI_FLOAT, MPI_SUM, comm(g), &r),
                                "MPI_Ireduce_scatter_block"));
    out = track({r});
    return Status::ok();
  }

  int groupRank(Communicator g) const override {
    int r = 0;
    MPI_Comm_rank(comm(g), &r);
    return r;
  }
  int groupSize(Communicator g) const override {
    int s = 0;
    MPI_Comm_size(comm(g), &s);
    return s;
  }

  Status broadcast(Communicator g, void *data, size_t bytes, int root, RequestId &out) override {
    DMUON_RETURN_IF_ERROR(failure_);
    std::vector<MPI_Request> reqs;
    auto *p = static_cast<uint8_t *>(data);
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += kMaxChunk) {
      int n = static_cast<int>(std::min(kMaxChunk, bytes - off));
      MPI_Request r;
      DMUON_RETURN_IF_ERROR(started(check(MPI_Ibcast(p + off, n, MPI_BYTE, root, comm(g), &r),
                                          "MPI_Ibcast"),
                                    reqs));
      reqs.push_back(r);
      if (bytes == 0)
        break;
    }
    out = track(std::move(reqs));
    return Status::ok();
  }

  Status allReduceSum(Communicator g, double *data, size_t count, RequestId &out) override {
    return allReduceFew(g, data, count, sizeof(double), MPI_DOUBLE, MPI_SUM, "allReduceSum", out);
  }

  Status allReduceMax(Communicator g, float *data, size_t count, RequestId &out) override {
    return allReduceFew(g, data, count, sizeof(float), MPI_FLOAT, MPI_MAX, "allReduceMax", out);
  }

  Status reduceSum(Communicator g, float *data, size_t count, int root, RequestId &out) override {
    DMUON_RETURN_IF_ERROR(failure_);
    std::vector<MPI_Request> reqs;
    const bool isRoot = groupRank(g) == root;
    const size_t chunk = kMaxChunk / sizeof(float);
    for (size_t off = 0; off < count; off += chunk) {
      int n = static_cast<int>(std::min(chunk, count - off));
      MPI_Request r;
      int rc = isRoot ? MPI_Ireduce(MPI_IN_PLACE, data + off, n, MPI_FLOAT, MPI_SUM, root,
                                    comm(g), &r)
                      : MPI_Ireduce(data + off, nullptr, n, MPI_FLOAT, MPI_SUM, root, comm(g), &r);
      DMUON_RETURN_IF_ERROR(started(check(rc, "MPI_Ireduce"), reqs));
      reqs.push_back(r);
    }
    out = track(std::move(reqs));
    return Status::ok();
  }

  Status allReduceSum(Communicator g, float *data, size_t count, RequestId &out) override {
    DMUON_RETURN_IF_ERROR(failure_);
    std::vector<MPI_Request> reqs;
    const size_t chunk = kMaxChunk / sizeof(float);
    for (size_t off = 0; off < count; off += chunk) {
      int n = static_cast<int>(std::min(chunk, count - off));
      MPI_Request r;
      DMUON_RETURN_IF_ERROR(started(
          check(MPI_Iallreduce(MPI_IN_PLACE, data + off, n, MPI_FLOAT, MPI_SUM, comm(g), &r),
                "MPI_Iallreduce"),
          reqs));
      reqs.push_back(r);
    }
    out = track(std::move(reqs));
    return Status::ok();
  }

  Status wait(RequestId id) override {
    DMUON_RETURN_IF_ERROR(failure_);
    auto it = pending_.find(id);
    if (it == pending_.end())
      return Status::ok();
    std::vector<MPI_Request> &reqs = it->second;
    if (timeout_ <= 0) {
      Status s = check(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(),
                                   MPI_STATUSES_IGNORE),
                       "MPI_Waitall");
      pending_.erase(it);
      return s;
    }
    // MPI has no timed wait: poll, backing off, until the deadline.
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(10);
    while (true) {
      int done = 0;
      Status s = check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done,
                                   MPI_STATUSES_IGNORE),
                       "MPI_Testall");
      if (!s || done) {
        pending_.erase(it);
        return s;
      }
      std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
      if (waited.count() > timeout_) {
        failure_ = backendError(
            "timed out after " + formatNumber(timeout_) + " s waiting for a collective on rank " +
            std::to_string(rank_) + " (a peer may have failed or skipped a hook); the runtime "
            "refuses further work and must be destroyed");
        return failure_;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }

  void setTimeout(double seconds) override { timeout_ = seconds; }

private:
  MPI_Comm comm(Communicator g) const { return groups_[static_cast<size_t>(g)]; }
  // A chunk that fails to start after others did: keep those tracked (they
  // still run) and refuse further work, as after a timeout.
  Status started(Status s, std::vector<MPI_Request> &begun) {
    if (s.isOk())
      return s;
    if (!begun.empty())
      track(std::move(begun));
    failure_ = s;
    return s;
  }

  // An all-reduce of a few scalars, in one message.
  Status allReduceFew(Communicator g, void *data, size_t count, size_t elementBytes,
                      MPI_Datatype type, MPI_Op op, const char *what, RequestId &out) {
    DMUON_RETURN_IF_ERROR(failure_);
    if (count > kMaxChunk / elementBytes)
      return invalidArgument(std::string(what) + ": " + std::to_string(count) +
                             " elements is too many");
    std::vector<MPI_Request> reqs(1);
    DMUON_RETURN_IF_ERROR(check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count),
                                               type, op, comm(g), reqs.data()),
                                "MPI_Iallreduce"));
    out = track(std::move(reqs));
    return Status::ok();
  }

  RequestId track(std::vector<MPI_Request> reqs) {
    RequestId id = next_++;
    pending_.emplace(id, std::move(reqs));
    return id;
  }

  MPI_Comm world_;
  MPI_Comm dup_ = MPI_COMM_NULL;
  std::vector<MPI_Comm> groups_; // indexed by Communicator; World is dup_
  int rank_ = 0, size_ = 1;
  RequestId next_ = 1;
  std::unordered_map<RequestId, std::vector<MPI_Request>> pending_;
  std::unordered_map<RequestId, std::unique_ptr<unsigned long long[]>> gatherBuffers_;
  double timeout_ = 0;
  Status failure_; // set once a wait timed out
};

} // namespace

namespace {

// MPI the runtime initialized itself (a null communicator in a process whose
// host never called MPI_Init) is finalized at exit, after the host's own
// exit work: a runtime destroyed later sees MPI finalized and frees nothing.
void finalizeOwnMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

// A null communicator is this process alone (MPI_COMM_SELF): a host at
// world size 1 with no MPI of its own (torchrun, a plain launch) needs no
// MPI_Init; the runtime initializes MPI (a singleton) if nobody has.
Status initializeMpiForSelf() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return Status::ok();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return invalidArgument("options.communicator is null (this process alone), but MPI is "
                           "already finalized and cannot be initialized again");
  DMUON_RETURN_IF_ERROR(check(MPI_Init(nullptr, nullptr), "MPI_Init (for a null communicator)"));
  std::atexit(finalizeOwnMpi);
  return Status::ok();
}

} // namespace

Status createMpiBackend(void *communicator, std::unique_ptr<Backend> &out) {
  if (!communicator) {
    DMUON_RETURN_IF_ERROR(initializeMpiForSelf());
  } else {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      return invalidArgument("MPI is not initialized; call MPI_Init before dmuon_runtime_create, "
                             "or pass a null options.communicator for this process alone");
  }
  MPI_Comm world = communicator ? *static_cast<MPI_Comm *>(communicator) : MPI_COMM_SELF;
  auto backend = std::make_unique<MpiBackend>(world);
  DMUON_RETURN_IF_ERROR(backend->init());
  out = std::move(backend);
  return Status::ok();
}

} // namespace dmuon::rt
