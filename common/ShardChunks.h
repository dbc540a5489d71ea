// DTensor's chunking of a tensor over the model-parallel mesh dims that
// Shard it (docs/dmuonc.md#model-parallelism): mesh dim by mesh dim, in mesh
// order, each splits what the ones before left of its tensor dim as
// torch.chunk does, so when a dim does not divide evenly the last shards are
// smaller. StridedShard(d, k) (DTensor's _StridedShard, split_factor k)
// splits what is left into k equal blocks, each into one sub-block per
// coordinate, and a coordinate holds its sub-block of every block, so its
// slice is k runs of the dim (localIntervalsOf). The compiler's local shape,
// the verifier, the runtime's slices and checkpoints, and the C ABI's
// dmuon_plan_param_slice all follow this one rule.
#ifndef DMUON_COMMON_SHARDCHUNKS_H
#define DMUON_COMMON_SHARDCHUNKS_H

#include "dmuon/plan_generated.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

namespace dmuon::common {

struct Chunk {
  int64_t offset = 0, size = 0;
};

// Chunk `index` of `n` elements split into `parts` as torch.chunk splits
// them: ceil(n / parts) each, the last ones what is left (possibly nothing).
inline Chunk chunkOf(int64_t n, int64_t parts, int64_t index) {
  const int64_t c = parts > 1 ? (n + parts - 1) / parts : n;
  const int64_t begin = std::min(n, index * c);
  return {begin, std::min(n, begin + c) - begin};
}

// The tensor dim each mesh dim shards (-1: none), the mesh dims' sizes, and
// the split factor k of each StridedShard(d, k) (1, or none listed, for a
// Shard).
struct ShardLayout {
  std::vector<int> tensorDimOf;
  std::vector<int64_t> meshSizes;
  std::vector<int64_t> splitFactors;
  int64_t splitFactorOf(size_t m) const {
    return m < splitFactors.size() && splitFactors[m] > 1 ? splitFactors[m] : 1;
  }
};

struct LocalSlice {
  std::vector<int64_t> shape, offset;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

// The slice of a tensor of `shape` that mesh coordinate `coord` holds: its
// shape, and where it starts. A StridedShard's slice is not one box (its
// offset is that of its first run; localIntervalsOf gives the runs), but its
// shape is right: the compiler only accepts even StridedShard splits, where
// k blocks of n sub-blocks give each coordinate what torch.chunk would.
inline LocalSlice localSliceOf(const std::vector<int64_t> &shape, const ShardLayout &layout,
                               const std::vector<int64_t> &coord) {
  LocalSlice s{shape, std::vector<int64_t>(shape.size(), 0)};
  for (size_t m = 0; m < layout.tensorDimOf.size() && m < coord.size(); ++m) {
    const int t = layout.tensorDimOf[m];
    if (t < 0 || t >= static_cast<int>(shape.size()))
      continue;
    const Chunk c = chunkOf(s.shape[t], layout.meshSizes[m], coord[m]);
    s.offset[t] += c.offset;
    s.shape[t] = c.size;
  }
  return s;
}

// Per tensor dim, the runs of global indices (offset, size) that mesh
// coordinate `coord` holds, in the order its local tensor holds them: the
// local tensor is their cartesian product, row-major. One run per dim
// unless a StridedShard splits it. An empty slice has no runs.
inline std::vector<std::vector<Chunk>> localIntervalsOf(const std::vector<int64_t> &shape,
                                                        const ShardLayout &layout,
                                                        const std::vector<int64_t> &coord) {
  std::vector<std::vector<Chunk>> runs(shape.size());
  for (size_t t = 0; t < shape.size(); ++t)
    if (shape[t] > 0)
      runs[t].push_back({0, shape[t]});
  // Positions [begin, begin + size) of the concatenation of `in`, appended
  // to `out` (a run that continues the last one extends it).
  auto take = [](const std::vector<Chunk> &in, int64_t begin, int64_t size,
                 std::vector<Chunk> &out) {
    int64_t at = 0; // position of the current run's first index
    for (const Chunk &r : in) {
      const int64_t lo = std::max(begin, at), hi = std::min(begin + size, at + r.size);
      if (lo < hi) {
        const int64_t first = r.offset + (lo - at);
        if (!out.empty() && out.back().offset + out.back().size == first)
          out.back().size += hi - lo;
        else
          out.push_back({first, hi - lo});
      }
      at += r.size;
    }
  };
  for (size_t m = 0; m < layout.tensorDimOf.size() && m < coord.size(); ++m) {
    const int t = layout.tensorDimOf[m];
    if (t < 0 || t >= static_cast<int>(shape.size()))
      continue;
    int64_t length = 0;
    for (const Chunk &r : runs[t])
      length += r.size;
    const int64_t n = layout.meshSizes[m], k = layout.splitFactorOf(m);
    std::vector<Chunk> next;
    // _StridedShard's split: length in k * n chunks (torch.chunk), chunk
    // j * n + coord of each block j; for k = 1, Shard's torch.chunk.
    for (int64_t j = 0; j < k; ++j) {
      const Chunk c = chunkOf(length, k * n, j * n + coord[m]);
      take(runs[t], c.offset, c.size, next);
    }
    runs[t] = std::move(next);
  }
  return runs;
}

// DTensor's StridedShard(dim, k) over a mesh dim of size n cuts what the
// mesh dims before it left of tensor dim `dim` into k blocks of n equal
// sub-blocks, so that extent must divide by k * n. For a `size` that divides
// by every mesh dim sharding the dim: the first mesh dim whose extent (set
// in `extent`) does not, or -1.
inline int unevenStridedBlock(int64_t size, const ShardLayout &layout, int dim,
                              int64_t &extent) {
  extent = size;
  for (size_t m = 0; m < layout.tensorDimOf.size(); ++m) {
    if (layout.tensorDimOf[m] != dim)
      continue;
    const int64_t n = layout.meshSizes[m], k = layout.splitFactorOf(m);
    if (n < 1 || extent % (k * n) != 0)
      return static_cast<int>(m);
    extent /= n;
  }
  return -1;
}

// Whether the StridedShard placements on tensor dim `dim` split it evenly, as
// DTensor requires: a dim with one is split evenly by every mesh dim, and
// each block split divides (unevenStridedBlock). True when no StridedShard
// touches the dim.
inline bool stridedSplitsEven(int64_t size, const ShardLayout &layout, int dim) {
  bool strided = false;
  int64_t product = 1;
  for (size_t m = 0; m < layout.tensorDimOf.size(); ++m)
    if (layout.tensorDimOf[m] == dim) {
      strided |= layout.splitFactorOf(m) > 1;
      product *= std::max<int64_t>(layout.meshSizes[m], 1);
    }
  int64_t extent;
  return !strided ||
         (size % product == 0 && unevenStridedBlock(size, layout, dim, extent) < 0);
}

// The largest slice, coordinate 0's on every mesh dim: the size every rank's
// buffers and collectives are padded to.
inline std::vector<int64_t> largestLocalShape(const std::vector<int64_t> &shape,
                                              const ShardLayout &layout) {
  return localSliceOf(shape, layout, std::vector<int64_t>(layout.tensorDimOf.size(), 0)).shape;
}

// Every size tensor dim `dim` takes over all coordinates (ascending); a 0
// among them means some rank would hold nothing of it.
inline std::vector<int64_t> chunkSizesOf(int64_t n, const ShardLayout &layout, int dim) {
  std::set<int64_t> sizes{n};
  for (size_t m = 0; m < layout.tensorDimOf.size(); ++m) {
    if (layout.tensorDimOf[m] != dim)
      continue;
    std::set<int64_t> next;
    const int64_t parts = layout.meshSizes[m];
    for (int64_t size : sizes) {
      // Full chunks of ceil(size / parts), then what is left, then nothing.
      const int64_t c = parts > 1 ? (size + parts - 1) / parts : size;
      const int64_t full = c > 0 ? std::min(parts, size / c) : parts;
      const int64_t rest = size - full * c;
      if (full > 0)
        next.insert(c);
      if (rest > 0)
        next.insert(rest);
      if (full + (rest > 0 ? 1 : 0) < parts)
        next.insert(0);
    }
    sizes = std::move(next);
  }
  return {sizes.begin(), sizes.end()};
}

// A plan param's layout: its Shard / StridedShard placements on the mesh's
// model-parallel dims (the ownership dims never chunk the local shard).
inline ShardLayout shardLayoutOf(const dmuon::plan::Param &p, const dmuon::plan::Mesh &mesh) {
  ShardLayout layout;
  const auto *dims = mesh.dims();
  const auto *pls = p.placements();
  for (flatbuffers::uoffset_t d = 0; dims && d < dims->size(); ++d) {
    layout.meshSizes.push_back(dims->Get(d)->size());
    layout.tensorDimOf.push_back(-1);
    if (!pls || d >= pls->size() || static_cast<int>(d) == mesh.shard_dim() ||
        static_cast<int>(d) == mesh.replicate_dim())
      continue;
    const dmuon::plan::Placement &pl = *pls->Get(d);
    if (pl.kind() == dmuon::plan::PlacementKind::shard ||
        pl.kind() == dmuon::plan::PlacementKind::strided_shard)
      layout.tensorDimOf.back() = pl.dim();
    if (pl.kind() == dmuon::plan::PlacementKind::strided_shard) {
      layout.splitFactors.resize(layout.meshSizes.size(), 1);
      layout.splitFactors.back() = pl.split_factor();
    }
  }
  return layout;
}

} // namespace dmuon::common

#endif
