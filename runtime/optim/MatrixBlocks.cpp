#include "optim/MatrixBlocks.h"

#include "kernels/LrScale.h"

#include <map>

namespace dmuon::rt {

namespace {

struct Block {
  int64_t rows, cols, offset; // offset: of its first element in a matrix
};

Block blockAt(const MatrixBlockSplit &s, int64_t rows, int64_t cols, int64_t start, int64_t size) {
  return s.dim == plan::BlockDim::rows ? Block{size, cols, start * cols} : Block{rows, size, start};
}

// The blocks of each size, in matrix order.
std::map<int64_t, std::vector<int64_t>> startsBySize(const MatrixBlockSplit &s) {
  std::map<int64_t, std::vector<int64_t>> out;
  int64_t start = 0;
  for (int64_t size : s.sizes) {
    out[size].push_back(start);
    start += size;
  }
  return out;
}

} // namespace

std::vector<MatrixShape> blockNsShapes(const MatrixBlockSplit &split, int64_t batch, int64_t rows,
                                       int64_t cols) {
  if (split.whole())
    return {{batch, rows, cols}};
  std::vector<MatrixShape> out;
  for (const auto &[size, starts] : startsBySize(split)) {
    const Block b = blockAt(split, rows, cols, 0, size);
    out.push_back({batch * static_cast<int64_t>(starts.size()), b.rows, b.cols});
  }
  return out;
}

Status orthogonalizeBlocks(Device &dev, float *x, int64_t batch, int64_t rows, int64_t cols,
                           const MatrixBlockSplit &split, const MuonHyper &h,
                           DeviceArray &scratch) {
  if (split.whole())
    return dev.newtonSchulz(x, batch, rows, cols, h);
  const auto groups = startsBySize(split);
  // Equal row blocks tile each matrix contiguously: a batch of blocks as it is.
  if (split.dim == plan::BlockDim::rows && groups.size() == 1)
    return dev.newtonSchulz(x, batch * static_cast<int64_t>(split.sizes.size()),
                            split.sizes.front(), cols, h);
  const size_t pitch = static_cast<size_t>(cols) * sizeof(float);
  for (const auto &[size, starts] : groups) {
    const Block shape = blockAt(split, rows, cols, 0, size);
    const int64_t elements = shape.rows * shape.cols;
    const int64_t count = batch * static_cast<int64_t>(starts.size());
    const size_t need = static_cast<size_t>(count * elements) * sizeof(float);
    if (scratch.size() < need)
      DMUON_RETURN_IF_ERROR(scratch.allocate(dev, need));
    const size_t width = static_cast<size_t>(shape.cols) * sizeof(float);
    // Gathers the blocks of this size into one batch, orthogonalizes them,
    // and puts them back where they were.
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1)
        DMUON_RETURN_IF_ERROR(dev.newtonSchulz(scratch.floats(), count, shape.rows, shape.cols, h));
      int64_t k = 0;
      for (int64_t m = 0; m < batch; ++m)
        for (int64_t start : starts) {
          float *inMatrix = x + m * rows * cols + blockAt(split, rows, cols, start, size).offset;
          float *inBatch = scratch.floats() + k++ * elements;
          const auto height = static_cast<size_t>(shape.rows);
          DMUON_RETURN_IF_ERROR(pass == 0
                                    ? dev.copy2D(inBatch, width, inMatrix, pitch, width, height)
                                    : dev.copy2D(inMatrix, pitch, inBatch, width, width, height));
        }
    }
  }
  return Status::ok();
}

Status scaleBlocks(Device &dev, float *x, int64_t batch, int64_t rows, int64_t cols,
                   const MatrixBlockSplit &split, const MuonHyper &h) {
  if (split.whole())
    return Status::ok();
  const double whole = kernels::lrScale(rows, cols, h.matchRmsAdamW);
  auto ratioOf = [&](int64_t size) {
    const Block b = blockAt(split, rows, cols, 0, size);
    return static_cast<float>(kernels::lrScale(b.rows, b.cols, h.matchRmsAdamW) / whole);
  };
  if (split.dim == plan::BlockDim::cols) {
    std::vector<float> scales;
    scales.reserve(static_cast<size_t>(cols));
    bool any = false;
    for (int64_t size : split.sizes) {
      const float r = ratioOf(size);
      any = any || r != 1.0f;
      scales.insert(scales.end(), static_cast<size_t>(size), r);
    }
    // Row-major matrices stacked: batch * rows rows of the same columns.
    return any ? dev.scaleColumns(x, batch * rows, cols, scales.data()) : Status::ok();
  }
  for (int64_t m = 0; m < batch; ++m) {
    int64_t start = 0;
    for (int64_t size : split.sizes) {
      const float r = ratioOf(size);
      float *block = x + m * rows * cols + start * cols;
      if (r != 1.0f)
        DMUON_RETURN_IF_ERROR(dev.scaleCopy(block, block, r, size * cols));
      start += size;
    }
  }
  return Status::ok();
}

} // namespace dmuon::rt
