// DTensor's chunking of a tensor over the model-parallel mesh dims that
// Shard it (docs/dmuonc.md#model-parallelism): mesh dim by mesh dim, in mesh
// order, each splits what the ones before left of its tensor dim as
// torch.chunk does, so when a dim does not divide evenly the last shards are
// smaller. The compiler's local shape, the verifier, the runtime's slices
// and the C ABI's dmuon_plan_param_slice all follow this one rule.
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
// one coordinate per mesh dim.
struct ShardLayout {
  std::vector<int> tensorDimOf;
  std::vector<int64_t> meshSizes;
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

// The slice of a tensor of `shape` that mesh coordinate `coord` holds.
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
  }
  return layout;
}

} // namespace dmuon::common

#endif
