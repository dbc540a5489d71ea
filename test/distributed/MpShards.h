// The model-parallel MPI tests' slices of a tensor along one dim, as DTensor's
// Shard splits it (torch.chunk), and their concatenation (MpModel.h).
#ifndef DMUON_TEST_DISTRIBUTED_MPSHARDS_H
#define DMUON_TEST_DISTRIBUTED_MPSHARDS_H

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

// Chunk `k` of `n` rows split into `parts` as torch.chunk splits them
// (DTensor's Shard): ceil(n / parts) each, the last ones what is left.
struct Rows {
  int64_t first = 0, count = 0;
};
inline Rows chunkRows(int64_t n, int parts, int k) {
  const int64_t c = (n + parts - 1) / parts;
  const int64_t first = std::min(n, k * c);
  return {first, std::min(n, first + c) - first};
}

// The `k`-th of `parts` torch.chunk slices of a tensor along dim `dim`.
inline std::vector<float> sliceOf(const std::vector<float> &full,
                                  const std::vector<int64_t> &shape, int dim, int parts, int k) {
  int64_t outer, inner;
  aroundDim(shape, dim, outer, inner);
  const Rows r = chunkRows(shape[static_cast<size_t>(dim)], parts, k);
  const int64_t row = r.count * inner, fullRow = shape[static_cast<size_t>(dim)] * inner;
  std::vector<float> out(static_cast<size_t>(outer * row));
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(&out[static_cast<size_t>(o * row)],
                &full[static_cast<size_t>(o * fullRow + r.first * inner)],
                static_cast<size_t>(row) * sizeof(float));
  return out;
}

// The inverse: `chunks` holds `parts` local slices back to back, each in a
// piece of `stride` elements (the largest slice's size).
inline std::vector<float> concatOf(const std::vector<float> &chunks, int64_t stride,
                                   const std::vector<int64_t> &shape, int dim, int parts) {
  int64_t outer, inner;
  aroundDim(shape, dim, outer, inner);
  const int64_t numel = outer * shape[static_cast<size_t>(dim)] * inner;
  const int64_t fullRow = shape[static_cast<size_t>(dim)] * inner;
  std::vector<float> out(static_cast<size_t>(numel));
  for (int k = 0; k < parts; ++k) {
    const Rows r = chunkRows(shape[static_cast<size_t>(dim)], parts, k);
    const int64_t row = r.count * inner;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(&out[static_cast<size_t>(o * fullRow + r.first * inner)],
                  &chunks[static_cast<size_t>(k * stride + o * row)],
                  static_cast<size_t>(row) * sizeof(float));
  }
  return out;
}

} // namespace mpmodel

#endif
