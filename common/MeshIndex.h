// Row-major mesh indexing (docs/dmuonc.md, --mesh): rank = ((c0 * n1 + c1) * n2 + c2)...,
// dim 0 varying slowest.
//
// common/ is the one place for definitions that the compiler (dmuonc), the
// runtime (libdmuon) and the tools share. Its headers are header-only and
// need nothing but the C++ standard library and the FlatBuffers-generated
// plan header: no LLVM, no protobuf.
#ifndef DMUON_COMMON_MESHINDEX_H
#define DMUON_COMMON_MESHINDEX_H

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

namespace dmuon::common {

// The identity: a list of dim sizes is its own size projection.
struct DimSize {
  template <typename T> int64_t operator()(const T &size) const {
    return static_cast<int64_t>(size);
  }
};

// Rank of `coord` on a mesh whose dims are `dims`; `sizeOf(dim)` gives a
// dim's size (the default takes the elements as sizes). `coord` has one
// entry per dim.
template <typename Dims, typename Coord, typename SizeOf = DimSize>
int64_t rowMajorRank(const Dims &dims, const Coord &coord, SizeOf sizeOf = {}) {
  int64_t rank = 0;
  size_t i = 0;
  for (const auto &d : dims)
    rank = rank * sizeOf(d) + static_cast<int64_t>(coord[i++]);
  return rank;
}

// The coordinate of `rank`, the inverse of rowMajorRank. A dim of size below
// 1 (only in a plan that was not verified) counts as 1.
template <typename Dims, typename SizeOf = DimSize>
std::vector<int64_t> rowMajorCoord(const Dims &dims, int64_t rank, SizeOf sizeOf = {}) {
  std::vector<int64_t> sizes;
  for (const auto &d : dims)
    sizes.push_back(sizeOf(d) > 0 ? sizeOf(d) : 1);
  std::vector<int64_t> coord(sizes.size());
  for (size_t i = sizes.size(); i-- > 0;) {
    coord[i] = rank % sizes[i];
    rank /= sizes[i];
  }
  return coord;
}

// Rank of owner slot (shard s, replicate r): coordinate s on `shardDim`, r on
// `replicateDim` (-1: the mesh has no such dim) and 0 on every other dim;
// -1 for a negative s or r.
template <typename Dims, typename SizeOf = DimSize>
int64_t slotRank(const Dims &dims, int shardDim, int replicateDim, int64_t s, int64_t r,
                 SizeOf sizeOf = {}) {
  if (s < 0 || r < 0)
    return -1;
  int64_t rank = 0;
  int i = 0;
  for (const auto &d : dims) {
    rank = rank * sizeOf(d) + (i == shardDim ? s : i == replicateDim ? r : 0);
    ++i;
  }
  return rank;
}

// The data index of a mesh coordinate (docs/plan-format.md, "Owner slots and
// ranks"): its coordinates on the data-carrying dims (`isData(i)` for dim i),
// row-major over them in mesh order; 0 on a mesh without such dims.
template <typename Dims, typename Coord, typename IsData, typename SizeOf = DimSize>
int64_t dataIndexOf(const Dims &dims, const Coord &coord, IsData isData, SizeOf sizeOf = {}) {
  int64_t index = 0;
  int i = 0;
  for (const auto &d : dims) {
    if (isData(i))
      index = index * sizeOf(d) + static_cast<int64_t>(coord[static_cast<size_t>(i)]);
    ++i;
  }
  return index;
}

// The coordinate on mesh dim `dim` of data index d (the inverse of
// dataIndexOf, one dim at a time): 0 on a dim that carries no data. A dim of
// size below 1 (only in a plan that was not verified) counts as 1. No
// vectors: the writer, the verifier and the per-rank figures call this per
// param, segment or fine slot.
template <typename Dims, typename IsData, typename SizeOf = DimSize>
int64_t dataCoordOf(const Dims &dims, int64_t d, int dim, IsData isData, SizeOf sizeOf = {}) {
  if (!isData(dim))
    return 0;
  auto sizeAt = [&](size_t i) {
    const int64_t n = sizeOf(*std::next(std::begin(dims), static_cast<std::ptrdiff_t>(i)));
    return n > 0 ? n : int64_t(1);
  };
  const size_t n = static_cast<size_t>(std::distance(std::begin(dims), std::end(dims)));
  for (size_t i = n; i-- > static_cast<size_t>(dim) + 1;)
    if (isData(static_cast<int>(i)))
      d /= sizeAt(i);
  return d % sizeAt(static_cast<size_t>(dim));
}

// The coordinates of data index d: dataCoordOf on every mesh dim.
template <typename Dims, typename IsData, typename SizeOf = DimSize>
std::vector<int64_t> dataCoordsOf(const Dims &dims, int64_t d, IsData isData,
                                  SizeOf sizeOf = {}) {
  std::vector<int64_t> coord;
  for (int i = 0, n = static_cast<int>(std::distance(std::begin(dims), std::end(dims))); i < n;
       ++i)
    coord.push_back(dataCoordOf(dims, d, i, isData, sizeOf));
  return coord;
}

// Rank of owner (s, r, data index d) on pipeline stage `stage`: as slotRank,
// with the data-carrying dims at the coordinates of `d` and the stage dim
// (`stageDim`, -1: none) at `stage`; -1 for a negative s, r, d or stage.
template <typename Dims, typename IsData, typename SizeOf = DimSize>
int64_t stageOwnerRank(const Dims &dims, int shardDim, int replicateDim, int stageDim,
                       int64_t stage, IsData isData, int64_t s, int64_t r, int64_t d,
                       SizeOf sizeOf = {}) {
  if (s < 0 || r < 0 || d < 0 || stage < 0)
    return -1;
  int64_t rank = 0;
  int i = 0;
  for (const auto &dim : dims) {
    const int64_t size = sizeOf(dim) > 0 ? sizeOf(dim) : int64_t(1);
    rank = rank * size + (i == shardDim       ? s
                          : i == replicateDim ? r
                          : i == stageDim     ? stage
                                              : dataCoordOf(dims, d, i, isData, sizeOf));
    ++i;
  }
  return rank;
}

// Rank of owner (s, r, data index d) with every other dim at 0 (stage 0).
template <typename Dims, typename IsData, typename SizeOf = DimSize>
int64_t ownerRank(const Dims &dims, int shardDim, int replicateDim, IsData isData, int64_t s,
                  int64_t r, int64_t d, SizeOf sizeOf = {}) {
  return stageOwnerRank(dims, shardDim, replicateDim, -1, 0, isData, s, r, d, sizeOf);
}

} // namespace dmuon::common

#endif
