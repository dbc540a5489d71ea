#include "backends/loopback/LoopbackBackend.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

namespace dmuon::rt {

namespace {

enum class Kind {
  AllGatherU64,
  Broadcast,
  ReduceSum,
  AllReduceSum,
  AllReduceSumF64,
  AllReduceMax,
  Gather,
  Scatter,
  AllGatherInPlace,
  ReduceScatterSum
};

const char *kindName(Kind k) {
  switch (k) {
  case Kind::AllGatherU64: return "allGather";
  case Kind::Broadcast: return "broadcast";
  case Kind::ReduceSum: return "reduceSum";
  case Kind::AllReduceSum: return "allReduceSum";
  case Kind::AllReduceSumF64: return "allReduceSum(double)";
  case Kind::AllReduceMax: return "allReduceMax";
  case Kind::Gather: return "gather";
  case Kind::Scatter: return "scatter";
  case Kind::AllGatherInPlace: return "allGatherInPlace";
  case Kind::ReduceScatterSum: return "reduceScatterSum";
  }
  return "?";
}

// One member's part of a collective: its buffers and arguments.
struct Post {
  Kind kind = Kind::Broadcast;
  void *data = nullptr;       // in place, or the receive buffer
  const void *send = nullptr; // gather, scatter, reduce-scatter
  size_t count = 0;           // elements (bytes for broadcast and all-gather)
  int root = 0;
  bool posted = false;
  uint64_t value = 0;                  // allGather(uint64)
  std::vector<uint64_t> *out = nullptr; // allGather(uint64)
};

struct Op {
  std::vector<Post> posts; // by group rank
  int arrived = 0;
  bool done = false;
  Status status;
};

template <typename T> T *at(void *p, size_t i) { return static_cast<T *>(p) + i; }
template <typename T> const T *at(const void *p, size_t i) { return static_cast<const T *>(p) + i; }

// Sums (or maxima) element by element over the members in group-rank order.
template <typename T, typename Combine>
void combineInto(std::vector<Post> &posts, size_t count, bool toAll, int root, Combine combine) {
  std::vector<T> acc(at<T>(static_cast<const void *>(posts[0].data), 0),
                     at<T>(static_cast<const void *>(posts[0].data), 0) + count);
  for (size_t k = 1; k < posts.size(); ++k)
    for (size_t i = 0; i < count; ++i)
      acc[i] = combine(acc[i], *at<T>(static_cast<const void *>(posts[k].data), i));
  for (size_t k = 0; k < posts.size(); ++k)
    if (toAll || static_cast<int>(k) == root)
      std::memcpy(posts[k].data, acc.data(), count * sizeof(T));
}

} // namespace

class LoopbackFabric {
public:
  explicit LoopbackFabric(int worldSize) : worldSize_(worldSize) {
    std::vector<int> world(static_cast<size_t>(worldSize));
    for (int r = 0; r < worldSize; ++r)
      world[static_cast<size_t>(r)] = r;
    comms_.push_back(std::move(world));
  }

  int worldSize() const { return worldSize_; }
  int memberCount(int comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(comms_[static_cast<size_t>(comm)].size());
  }

  // A collective over the world (MPI_Comm_split): `rank`'s communicator of
  // the ranks with its colour, ordered by (key, rank).
  Status split(int round, int rank, int color, int key, double timeout, int &comm, int &myRank) {
    std::unique_lock<std::mutex> lock(mutex_);
    Split &s = splits_[round];
    if (s.color.empty()) {
      s.color.assign(static_cast<size_t>(worldSize_), 0);
      s.key.assign(static_cast<size_t>(worldSize_), 0);
      s.comm.assign(static_cast<size_t>(worldSize_), -1);
      s.rankIn.assign(static_cast<size_t>(worldSize_), -1);
    }
    s.color[static_cast<size_t>(rank)] = color;
    s.key[static_cast<size_t>(rank)] = key;
    if (++s.arrived == worldSize_) {
      std::map<int, std::vector<std::pair<int, int>>> byColor; // colour -> (key, rank)
      for (int r = 0; r < worldSize_; ++r)
        byColor[s.color[static_cast<size_t>(r)]].push_back({s.key[static_cast<size_t>(r)], r});
      for (auto &[c, list] : byColor) {
        std::sort(list.begin(), list.end());
        const int id = static_cast<int>(comms_.size());
        std::vector<int> ranks;
        for (size_t k = 0; k < list.size(); ++k) {
          ranks.push_back(list[k].second);
          s.comm[static_cast<size_t>(list[k].second)] = id;
          s.rankIn[static_cast<size_t>(list[k].second)] = static_cast<int>(k);
        }
        comms_.push_back(std::move(ranks));
      }
      s.done = true;
      changed_.notify_all();
    }
    if (!waitUntil(lock, timeout, [&] { return s.done; }))
      return timedOut(rank, "a communicator split");
    comm = s.comm[static_cast<size_t>(rank)];
    myRank = s.rankIn[static_cast<size_t>(rank)];
    return Status::ok();
  }

  // Posts this member's part of collective number `seq` on `comm`; the last
  // member to arrive performs it.
  std::shared_ptr<Op> post(int comm, uint64_t seq, int groupRank, const Post &p) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<Op> &slot = ops_[{comm, seq}];
    if (!slot) {
      slot = std::make_shared<Op>();
      slot->posts.resize(comms_[static_cast<size_t>(comm)].size());
    }
    std::shared_ptr<Op> op = slot;
    op->posts[static_cast<size_t>(groupRank)] = p;
    op->posts[static_cast<size_t>(groupRank)].posted = true;
    if (++op->arrived == static_cast<int>(op->posts.size())) {
      op->status = perform(*op);
      op->done = true;
      ops_.erase({comm, seq});
      changed_.notify_all();
    }
    return op;
  }

  Status wait(const Op &op, int rank, double timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!waitUntil(lock, timeout, [&] { return op.done; }))
      return timedOut(rank, "a collective");
    return op.status;
  }

private:
  struct Split {
    std::vector<int> color, key, comm, rankIn;
    int arrived = 0;
    bool done = false;
  };

  template <typename Pred>
  bool waitUntil(std::unique_lock<std::mutex> &lock, double timeout, Pred pred) {
    if (timeout <= 0) {
      changed_.wait(lock, pred);
      return true;
    }
    return changed_.wait_for(lock, std::chrono::duration<double>(timeout), pred);
  }

  static Status timedOut(int rank, const char *what) {
    return backendError("loopback rank " + std::to_string(rank) + " timed out waiting for " +
                        what + " (a peer skipped it or issued collectives in another order)");
  }

  // Every member's arguments must agree, as MPI requires; a mismatch is an
  // error for all of them rather than a silent wrong result.
  static Status perform(Op &op) {
    std::vector<Post> &p = op.posts;
    const Post &first = p.front();
    for (const Post &q : p)
      if (q.kind != first.kind || q.count != first.count || q.root != first.root)
        return backendError(std::string("loopback collective mismatch: ") + kindName(first.kind) +
                            " of " + std::to_string(first.count) + " (root " +
                            std::to_string(first.root) + ") met " + kindName(q.kind) + " of " +
                            std::to_string(q.count) + " (root " + std::to_string(q.root) + ")");
    const size_t n = p.size(), count = first.count;
    if (first.root < 0 || static_cast<size_t>(first.root) >= n)
      return backendError("loopback collective: root " + std::to_string(first.root) +
                          " outside a group of " + std::to_string(n));
    const int root = first.root;
    switch (first.kind) {
    case Kind::AllGatherU64:
      for (const Post &q : p)
        for (size_t k = 0; k < n; ++k)
          (*q.out)[k] = p[k].value;
      break;
    case Kind::Broadcast:
      for (size_t k = 0; k < n; ++k)
        if (static_cast<int>(k) != root && count)
          std::memcpy(p[k].data, p[static_cast<size_t>(root)].data, count);
      break;
    case Kind::ReduceSum:
      combineInto<float>(p, count, false, root, [](float a, float b) { return a + b; });
      break;
    case Kind::AllReduceSum:
      combineInto<float>(p, count, true, root, [](float a, float b) { return a + b; });
      break;
    case Kind::AllReduceSumF64:
      combineInto<double>(p, count, true, root, [](double a, double b) { return a + b; });
      break;
    case Kind::AllReduceMax:
      combineInto<float>(p, count, true, root, [](float a, float b) { return std::max(a, b); });
      break;
    case Kind::Gather:
      for (size_t k = 0; k < n; ++k)
        std::memcpy(at<float>(p[static_cast<size_t>(root)].data, k * count), p[k].send,
                    count * sizeof(float));
      break;
    case Kind::Scatter:
      for (size_t k = 0; k < n; ++k)
        std::memcpy(p[k].data, at<float>(p[static_cast<size_t>(root)].send, k * count),
                    count * sizeof(float));
      break;
    case Kind::AllGatherInPlace:
      for (size_t k = 0; k < n; ++k)
        for (size_t j = 0; j < n; ++j)
          if (j != k)
            std::memcpy(at<uint8_t>(p[j].data, k * count),
                        at<uint8_t>(static_cast<const void *>(p[k].data), k * count), count);
      break;
    case Kind::ReduceScatterSum:
      for (size_t k = 0; k < n; ++k)
        for (size_t i = 0; i < count; ++i) {
          float sum = 0;
          for (size_t j = 0; j < n; ++j)
            sum += *at<float>(p[j].send, k * count + i);
          *at<float>(p[k].data, i) = sum;
        }
      break;
    }
    return Status::ok();
  }

  const int worldSize_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::vector<int>> comms_; // members in group-rank order; 0 is the world
  std::map<int, Split> splits_;
  std::map<std::pair<int, uint64_t>, std::shared_ptr<Op>> ops_;
};

std::shared_ptr<LoopbackFabric> createLoopbackFabric(int worldSize) {
  return std::make_shared<LoopbackFabric>(std::max(1, worldSize));
}

namespace {

class LoopbackBackend final : public Backend {
public:
  LoopbackBackend(std::shared_ptr<LoopbackFabric> fabric, int rank)
      : fabric_(std::move(fabric)), rank_(rank) {
    groups_.assign(4, Group{});
    groups_[static_cast<int>(Communicator::World)] = Group{0, rank, fabric_->worldSize()};
  }

  int worldRank() const override { return rank_; }
  int worldSize() const override { return fabric_->worldSize(); }

  Status allGather(uint64_t value, std::vector<uint64_t> &out) override {
    out.assign(static_cast<size_t>(worldSize()), 0);
    Post p;
    p.kind = Kind::AllGatherU64;
    p.value = value;
    p.out = &out;
    RequestId id;
    DMUON_RETURN_IF_ERROR(issue(Communicator::World, p, id));
    return wait(id);
  }

  Status createGroups(Split shard, Split replicate, Split dp) override {
    const Split splits[] = {shard, replicate, dp};
    for (int g = 0; g < 3; ++g)
      DMUON_RETURN_IF_ERROR(split(splits[g], groups_[static_cast<size_t>(g)]));
    return Status::ok();
  }

  Status createGroup(Split s, Communicator &out) override {
    Group g;
    DMUON_RETURN_IF_ERROR(split(s, g));
    out = static_cast<Communicator>(groups_.size());
    groups_.push_back(g);
    return Status::ok();
  }

  int groupRank(Communicator g) const override { return group(g).rank; }
  int groupSize(Communicator g) const override { return group(g).size; }

  Status broadcast(Communicator g, void *data, size_t bytes, int root, RequestId &out) override {
    Post p;
    p.kind = Kind::Broadcast;
    p.data = data;
    p.count = bytes;
    p.root = root;
    return issue(g, p, out);
  }
  Status reduceSum(Communicator g, float *data, size_t count, int root, RequestId &out) override {
    return inPlace(g, Kind::ReduceSum, data, count, root, out);
  }
  Status allReduceSum(Communicator g, float *data, size_t count, RequestId &out) override {
    return inPlace(g, Kind::AllReduceSum, data, count, 0, out);
  }
  Status allReduceSum(Communicator g, double *data, size_t count, RequestId &out) override {
    return inPlace(g, Kind::AllReduceSumF64, data, count, 0, out);
  }
  Status allReduceMax(Communicator g, float *data, size_t count, RequestId &out) override {
    return inPlace(g, Kind::AllReduceMax, data, count, 0, out);
  }
  Status gather(Communicator g, const float *send, float *recv, size_t count, int root,
                RequestId &out) override {
    return sendRecv(g, Kind::Gather, send, recv, count, root, out);
  }
  Status scatter(Communicator g, const float *send, float *recv, size_t count, int root,
                 RequestId &out) override {
    return sendRecv(g, Kind::Scatter, send, recv, count, root, out);
  }
  Status allGatherInPlace(Communicator g, void *data, size_t bytesPerRank,
                          RequestId &out) override {
    Post p;
    p.kind = Kind::AllGatherInPlace;
    p.data = data;
    p.count = bytesPerRank;
    return issue(g, p, out);
  }
  Status reduceScatterSum(Communicator g, const float *send, float *recv, size_t count,
                          RequestId &out) override {
    return sendRecv(g, Kind::ReduceScatterSum, send, recv, count, 0, out);
  }

  Status wait(RequestId id) override {
    DMUON_RETURN_IF_ERROR(failure_);
    auto it = pending_.find(id);
    if (it == pending_.end())
      return Status::ok();
    std::shared_ptr<Op> op = std::move(it->second);
    pending_.erase(it);
    Status s = fabric_->wait(*op, rank_, timeout_);
    if (!s)
      failure_ = s; // as the MPI backend: the world is broken now
    return s;
  }

  void setTimeout(double seconds) override { timeout_ = seconds; }

private:
  struct Group {
    int comm = -1, rank = 0, size = 1;
  };

  const Group &group(Communicator g) const { return groups_[static_cast<size_t>(g)]; }

  Status split(Split s, Group &g) {
    DMUON_RETURN_IF_ERROR(failure_);
    int comm = -1, rank = 0;
    Status st = fabric_->split(splitRound_++, rank_, s.color, s.key, timeout_, comm, rank);
    if (!st)
      return failure_ = st;
    g = Group{comm, rank, fabric_->memberCount(comm)};
    return Status::ok();
  }

  Status issue(Communicator g, Post p, RequestId &out) {
    DMUON_RETURN_IF_ERROR(failure_);
    const size_t index = static_cast<size_t>(g);
    if (index >= groups_.size() || groups_[index].comm < 0)
      return invalidState("loopback: communicator " + std::to_string(index) +
                          " was never created");
    const Group &grp = groups_[index];
    std::shared_ptr<Op> op = fabric_->post(grp.comm, seq_[grp.comm]++, grp.rank, p);
    out = next_++;
    pending_.emplace(out, std::move(op));
    return Status::ok();
  }

  Status inPlace(Communicator g, Kind kind, void *data, size_t count, int root, RequestId &out) {
    Post p;
    p.kind = kind;
    p.data = data;
    p.count = count;
    p.root = root;
    return issue(g, p, out);
  }

  Status sendRecv(Communicator g, Kind kind, const float *send, float *recv, size_t count,
                  int root, RequestId &out) {
    Post p;
    p.kind = kind;
    p.send = send;
    p.data = recv;
    p.count = count;
    p.root = root;
    return issue(g, p, out);
  }

  std::shared_ptr<LoopbackFabric> fabric_;
  const int rank_;
  std::vector<Group> groups_; // indexed by Communicator
  std::unordered_map<int, uint64_t> seq_; // per fabric communicator
  int splitRound_ = 0;
  RequestId next_ = 1;
  std::unordered_map<RequestId, std::shared_ptr<Op>> pending_;
  double timeout_ = 0;
  Status failure_;
};

} // namespace

Status createLoopbackBackend(std::shared_ptr<LoopbackFabric> fabric, int rank,
                             std::unique_ptr<Backend> &out) {
  if (!fabric)
    return invalidArgument("loopback backend: no fabric");
  if (rank < 0 || rank >= fabric->worldSize())
    return invalidArgument("loopback backend: rank " + std::to_string(rank) +
                           " outside a world of " + std::to_string(fabric->worldSize()));
  out = std::make_unique<LoopbackBackend>(std::move(fabric), rank);
  return Status::ok();
}

} // namespace dmuon::rt
