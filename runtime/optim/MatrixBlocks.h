// A matrix rule's param orthogonalized as blocks (plan 1.9 Param.block_sizes:
// per head, or Q, K and V of a fused projection): Newton-Schulz on each
// block apart, blocks of one shape in one batched call, and each block's own
// learning-rate scale.
#ifndef DMUON_RUNTIME_OPTIM_MATRIXBLOCKS_H
#define DMUON_RUNTIME_OPTIM_MATRIXBLOCKS_H

#include "core/Params.h"
#include "hal/Device.h"

#include <cstdint>
#include <vector>

namespace dmuon::rt {

// The NS runs a step makes on a batch x rows x cols matrix: one shape per
// distinct block size, batched.
std::vector<MatrixShape> blockNsShapes(const MatrixBlockSplit &split, int64_t batch, int64_t rows,
                                       int64_t cols);

// Orthogonalizes every block of the batch x rows x cols matrices at x in
// place (the whole matrix when unsplit). `scratch` grows to the largest
// batch of equal blocks that is not already contiguous.
Status orthogonalizeBlocks(Device &dev, float *x, int64_t batch, int64_t rows, int64_t cols,
                           const MatrixBlockSplit &split, const MuonHyper &h, DeviceArray &scratch);

// Muon's update applies lrScale(rows, cols) (kernels/LrScale.h) to the whole
// matrix; this multiplies each block by lrScale(block) / lrScale(rows, cols)
// so that every block moves at its own shape's rate.
Status scaleBlocks(Device &dev, float *x, int64_t batch, int64_t rows, int64_t cols,
                   const MatrixBlockSplit &split, const MuonHyper &h);

} // namespace dmuon::rt

#endif
