// The collectives the executor needs, over the communicators a plan implies.
// The executor calls only this interface and never knows which backend runs.
#ifndef DMUON_RUNTIME_HAL_BACKEND_H
#define DMUON_RUNTIME_HAL_BACKEND_H

#include "base/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace dmuon::rt {

// Which communicator: the ranks of one replicate row that differ only in
// shard (Shard), one shard column (Replicate), every data-parallel rank with
// the same model-parallel coordinate (DataParallel), or everyone (World).
// Groups from createGroup follow (values 4, 5, ...): the ranks along one
// model-parallel mesh dim, for gathering TP-sharded matrices.
enum class Communicator : int { Shard = 0, Replicate = 1, DataParallel = 2, World = 3 };

// An in-flight collective; waiting completes it.
using RequestId = int64_t;

class Backend {
public:
  virtual ~Backend() = default;

  virtual int worldRank() const = 0;
  virtual int worldSize() const = 0;
  // Gathers one 64-bit value from every rank of the world, in rank order.
  virtual Status allGather(uint64_t value, std::vector<uint64_t> &out) = 0;
  // Splits the world into the executor's groups. `shardColor` etc. name the
  // group a rank belongs to and `key` orders ranks inside it.
  struct Split {
    int color;
    int key;
  };
  virtual Status createGroups(Split shard, Split replicate, Split dataParallel) = 0;
  virtual Status createGroup(Split split, Communicator &out) = 0;
  virtual int groupRank(Communicator g) const = 0;
  virtual int groupSize(Communicator g) const = 0;

  virtual Status broadcast(Communicator g, void *data, size_t bytes, int root, RequestId &out) = 0;
  // Sum of `count` floats onto `root`, in place there; other ranks' buffers
  // are only read.
  virtual Status reduceSum(Communicator g, float *data, size_t count, int root,
                           RequestId &out) = 0;
  virtual Status allReduceSum(Communicator g, float *data, size_t count, RequestId &out) = 0;
  // For the few scalars decided together (gradient norms): exact sums.
  virtual Status allReduceSum(Communicator g, double *data, size_t count, RequestId &out) = 0;
  // The element-wise maximum, in place (QK-Clip's per-head max logits).
  virtual Status allReduceMax(Communicator g, float *data, size_t count, RequestId &out) = 0;
  // `count` floats from every rank into `recv` on `root`, in group-rank
  // order (recv holds size*count floats there; ignored elsewhere).
  virtual Status gather(Communicator g, const float *send, float *recv, size_t count, int root,
                        RequestId &out) = 0;
  // The inverse: group rank k receives floats [k*count, (k+1)*count) of
  // `send` on `root`.
  virtual Status scatter(Communicator g, const float *send, float *recv, size_t count, int root,
                         RequestId &out) = 0;
  // In place over `g`: `data` holds size * bytesPerRank bytes, this rank's
  // part at groupRank * bytesPerRank; afterwards every rank holds all parts.
  virtual Status allGatherInPlace(Communicator g, void *data, size_t bytesPerRank,
                                  RequestId &out) = 0;
  // Sums `send` (size * count floats) over `g`; group rank k receives the
  // sum of floats [k*count, (k+1)*count) in `recv` (count floats, not
  // inside `send`).
  virtual Status reduceScatterSum(Communicator g, const float *send, float *recv, size_t count,
                                  RequestId &out) = 0;
  virtual Status wait(RequestId id) = 0;
  // A wait longer than this fails, and the backend refuses all further work
  // (a peer is gone or stuck; the collective cannot be taken back). 0: none.
  virtual void setTimeout(double seconds) = 0;

  // Collectives issued between beginGroup and endGroup may be launched as
  // one (ncclGroupStart/End); their requests complete after endGroup.
  virtual Status beginGroup() { return Status::ok(); }
  virtual Status endGroup() { return Status::ok(); }
};

// Closes a collective group on every path out of a scope.
class CollectiveGroup {
public:
  explicit CollectiveGroup(Backend &b) : backend_(b), status_(b.beginGroup()) {}
  CollectiveGroup(const CollectiveGroup &) = delete;
  CollectiveGroup &operator=(const CollectiveGroup &) = delete;
  ~CollectiveGroup() {
    if (!closed_)
      (void)backend_.endGroup();
  }
  const Status &opened() const { return status_; }
  Status close() {
    closed_ = true;
    return backend_.endGroup();
  }

private:
  Backend &backend_;
  Status status_;
  bool closed_ = false;
};

} // namespace dmuon::rt

#endif
