// The model-parallel MPI tests' slices of a tensor along one dim, as DTensor
// splits it over the model-parallel mesh dim (Shard: torch.chunk;
// StridedShard(dim, k): the k interleaved runs of common/ShardChunks.h, the
// rule the runtime and its checkpoints follow), and their concatenation
// (MpModel.h).
#ifndef DMUON_TEST_DISTRIBUTED_MPSHARDS_H
#define DMUON_TEST_DISTRIBUTED_MPSHARDS_H

#include "common/ShardChunks.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace mpmodel {

// The elements before and after dim `dim` of a row-major tensor.
inline void aroundDim(const std::vector<int64_t> &shape, int dim, int64_t &outer,
                      int64_t &inner) {
  outer = inner = 1;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d)
    if (d < dim)
      outer *= shape[static_cast<size_t>(d)];
    else if (d > dim)
      inner *= shape[static_cast<size_t>(d)];
}

// The runs of rows of dim `dim` that coordinate `k` of `parts` holds, in its
// local order: one torch.chunk for a Shard (splitFactor 1), `splitFactor`
// interleaved runs for a StridedShard.
inline std::vector<dmuon::common::Chunk> runsOf(const std::vector<int64_t> &shape, int dim,
                                                int parts, int splitFactor, int k) {
  const dmuon::common::ShardLayout layout{{dim}, {parts}, {splitFactor}};
  return dmuon::common::localIntervalsOf(shape, layout, {k})[static_cast<size_t>(dim)];
}

inline int64_t rowsOf(const std::vector<int64_t> &shape, int dim, int parts, int splitFactor,
                      int k) {
  int64_t rows = 0;
  for (const dmuon::common::Chunk &r : runsOf(shape, dim, parts, splitFactor, k))
    rows += r.size;
  return rows;
}

// Calls f(full offset, local offset, count) for each contiguous run of
// elements that coordinate `k` holds, row-major in both tensors.
template <typename F>
void forEachRun(const std::vector<int64_t> &shape, int dim, int parts, int splitFactor, int k,
                F f) {
  int64_t outer, inner;
  aroundDim(shape, dim, outer, inner);
  const std::vector<dmuon::common::Chunk> runs = runsOf(shape, dim, parts, splitFactor, k);
  const int64_t rows = rowsOf(shape, dim, parts, splitFactor, k);
  const int64_t fullRow = shape[static_cast<size_t>(dim)] * inner;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = o * rows * inner;
    for (const dmuon::common::Chunk &r : runs) {
      f(o * fullRow + r.offset * inner, at, r.size * inner);
      at += r.size * inner;
    }
  }
}

// The `k`-th of `parts` slices of a tensor along dim `dim`.
inline std::vector<float> sliceOf(const std::vector<float> &full,
                                  const std::vector<int64_t> &shape, int dim, int parts, int k,
                                  int splitFactor = 1) {
  int64_t outer, inner;
  aroundDim(shape, dim, outer, inner);
  std::vector<float> out(
      static_cast<size_t>(outer * rowsOf(shape, dim, parts, splitFactor, k) * inner));
  forEachRun(shape, dim, parts, splitFactor, k, [&](int64_t f, int64_t l, int64_t n) {
    std::memcpy(&out[static_cast<size_t>(l)], &full[static_cast<size_t>(f)],
                static_cast<size_t>(n) * sizeof(float));
  });
  return out;
}

// The inverse: `chunks` holds `parts` local slices back to back, each in a
// piece of `stride` elements (the largest slice's size).
inline std::vector<float> concatOf(const std::vector<float> &chunks, int64_t stride,
                                   const std::vector<int64_t> &shape, int dim, int parts,
                                   int splitFactor = 1) {
  int64_t numel = 1;
  for (int64_t d : shape)
    numel *= d;
  std::vector<float> out(static_cast<size_t>(numel));
  for (int k = 0; k < parts; ++k)
    forEachRun(shape, dim, parts, splitFactor, k, [&](int64_t f, int64_t l, int64_t n) {
      std::memcpy(&out[static_cast<size_t>(f)], &chunks[static_cast<size_t>(k * stride + l)],
                  static_cast<size_t>(n) * sizeof(float));
    });
  return out;
}

} // namespace mpmodel

#endif
