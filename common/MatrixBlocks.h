// The blocks a matrix is orthogonalized as (plan.fbs Param.block_sizes):
// their shapes and NS flops, as dmuonc prices them and the runtime counts
// them. Header-only; the compiler, the verifier and the runtime share it.
#ifndef DMUON_COMMON_MATRIXBLOCKS_H
#define DMUON_COMMON_MATRIXBLOCKS_H

#include "dmuon/plan_generated.h"
#include "kernels/NsForms.h"

#include <cstdint>
#include <span>

namespace dmuon::common {

// More blocks than this in one matrix is a mistake (a head count per
// element), and would cost a plan 8 bytes each.
inline constexpr int64_t kMaxMatrixBlocks = 65536;
// Nor may a model's blocked matrices hold more than this many blocks in all
// (each matrix's count, summed): 128 MiB of the plan's 2 GiB.
inline constexpr int64_t kMaxModelMatrixBlocks = int64_t{1} << 24;

struct BlockShape {
  int64_t rows = 0, cols = 0;
};

// Block `size` of a rows x cols matrix split along `dim`.
inline BlockShape blockShape(plan::BlockDim dim, int64_t rows, int64_t cols, int64_t size) {
  return dim == plan::BlockDim::rows ? BlockShape{size, cols} : BlockShape{rows, size};
}

// The largest block: the shape whose NS form (kernels::ns::chooseForm) every
// block of the matrix runs.
inline BlockShape largestBlock(plan::BlockDim dim, int64_t rows, int64_t cols,
                               std::span<const int64_t> sizes) {
  if (dim == plan::BlockDim::none || sizes.empty())
    return {rows, cols};
  int64_t largest = 0;
  for (int64_t s : sizes)
    largest = s > largest ? s : largest;
  return blockShape(dim, rows, cols, largest);
}

// NS flops of one batch slice: every block's, in `form`.
inline double blockedNsFlops(kernels::NsForm form, plan::BlockDim dim, int64_t rows, int64_t cols,
                             std::span<const int64_t> sizes, int steps) {
  if (dim == plan::BlockDim::none || sizes.empty())
    return kernels::ns::flops(form, rows, cols, steps);
  double total = 0;
  for (int64_t s : sizes) {
    const BlockShape b = blockShape(dim, rows, cols, s);
    total += kernels::ns::flops(form, b.rows, b.cols, steps);
  }
  return total;
}

} // namespace dmuon::common

#endif
