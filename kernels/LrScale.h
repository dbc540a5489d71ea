// Muon's learning-rate scale for an m x n matrix, shared by the CPU and CUDA
// kernels so both round the same double to float.
#ifndef DMUON_KERNELS_LRSCALE_H
#define DMUON_KERNELS_LRSCALE_H

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace dmuon::kernels {

// sqrt(max(1, m/n)) ("original"), or 0.2*sqrt(max(m, n)) ("match_rms_adamw").
inline double lrScale(int64_t rows, int64_t cols, bool matchRmsAdamW) {
  const auto m = static_cast<double>(rows);
  const auto n = static_cast<double>(cols);
  if (matchRmsAdamW)
    return 0.2 * std::sqrt(std::max(m, n));
  return std::sqrt(std::max(1.0, m / n));
}

} // namespace dmuon::kernels

#endif
