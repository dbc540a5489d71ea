// Which chunk of a param a checkpoint entry holds, and assembling a rank's
// chunk from the entries. A param sharded on a model-parallel mesh dim is
// saved as one entry per model-parallel shard, each holding its slice of the
// full param (DTensor's chunking rule, core/ParamSlice.h); a loading rank
// copies its own slice out of whichever entries overlap it. So the
// model-parallel layout may differ between save and load (tp=2 to tp=4, or
// sharded to whole), and a format-1 entry, which holds the whole param, is
// just the slice that covers everything. A StridedShard param's local state
// is not one box but a product of runs per dim (common::localIntervalsOf):
// it is saved as one entry per box (LocalBoxes), and loaded box by box.
#ifndef DMUON_RUNTIME_CHECKPOINT_CHECKPOINTSLICE_H
#define DMUON_RUNTIME_CHECKPOINT_CHECKPOINTSLICE_H

#include "base/Status.h"
#include "checkpoint/CheckpointFile.h"
#include "common/ShardChunks.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dmuon::rt::ckpt {

// "[0:32, 16:48]" (start:end per dim); "[whole]" for a format-1 entry.
std::string describe(const Slice &s);

// `s` resolved against the param's full shape (a format-1 entry becomes the
// whole shape). Empty when it fits, else why not.
std::string resolve(const Slice &s, const std::vector<int64_t> &full, Slice &out);

// Copies the elements of `dst`'s box that `src`'s box also holds from `src`
// into `dst`, and marks them in `covered` (one byte per element of `dst`).
// Returns false, copying nothing, when one of them was covered already: two
// entries that overlap are a corrupt checkpoint.
bool copyOverlap(const float *src, const Slice &srcBox, float *dst, const Slice &dstBox,
                 std::vector<uint8_t> &covered);

// A rank's local state of a param as boxes of the full param: one per
// combination of one run per dim (the runs of common::localIntervalsOf), in
// row-major order of the local tensor. `global[i]` is box i in the full
// param, `local[i]` the same box in the local tensor of shape `localShape`.
// One box, the whole local tensor, unless a StridedShard splits a dim.
struct LocalBoxes {
  std::vector<int64_t> localShape;
  std::vector<Slice> global, local;
  int64_t numel() const; // of the local tensor
  bool whole() const { return global.size() == 1; }
};
LocalBoxes boxesOf(const std::vector<std::vector<common::Chunk>> &runs);
// The boxes of a per-row state (Kind::NorMuonV) of a param with `boxes`:
// each dim from `firstColumnDim` on collapsed to [0, 1). The column dims of
// such a param are never split, so the boxes stay disjoint.
LocalBoxes rowBoxesOf(const LocalBoxes &boxes, size_t firstColumnDim);
std::vector<int64_t> rowShapeOf(std::vector<int64_t> shape, size_t firstColumnDim);
// Box `i`'s values out of the local tensor `local` (row-major), and back in.
void extractBox(const LocalBoxes &boxes, size_t i, const float *local, std::vector<float> &out);
void placeBox(const LocalBoxes &boxes, size_t i, const float *box, float *local);

// Every entry of every shard, by param name and kind, in shard order.
class Catalog {
public:
  explicit Catalog(const std::vector<ShardIndex> &shards);
  // This rank's slice `want` (resolved) of the `kind` state of param `name`
  // with full shape `full`, from the entries that overlap it. Refuses, naming
  // the param, the slices and the checkpoint `dir`: no entry, a slice that
  // does not fit the shape, overlapping entries, or elements no entry holds.
  Status read(const std::string &dir, const std::string &name, Kind kind,
              const std::vector<int64_t> &full, const Slice &want, std::vector<float> &out) const;

private:
  const std::vector<ShardIndex> &shards_;
  std::map<std::pair<std::string, Kind>, std::vector<std::pair<size_t, size_t>>> byKey_;
};

} // namespace dmuon::rt::ckpt

#endif
