#include "kernels/cpu/MuonKernels.h"

#include <cmath>

namespace dmuon::kernels {

void normuonNormalize(float *o, float *v, int64_t batch, int64_t rows, int64_t cols,
                      float beta2) {
  if (batch <= 0 || rows <= 0 || cols <= 0)
    return;
  const auto keep = beta2, take = static_cast<float>(1.0 - static_cast<double>(beta2));
  for (int64_t b = 0; b < batch; ++b) {
    float *m = o + b * rows * cols;
    float *vb = v + b * rows;
    double before = 0, after = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double squares = 0;
      for (int64_t c = 0; c < cols; ++c)
        squares += static_cast<double>(m[r * cols + c]) * m[r * cols + c];
      vb[r] = keep * vb[r] + take * static_cast<float>(squares / static_cast<double>(cols));
      const double scale = 1.0 / (std::sqrt(static_cast<double>(vb[r])) + 1e-10);
      before += squares;
      after += squares * scale * scale;
    }
    const double keepNorm = std::sqrt(before) / (std::sqrt(after) + 1e-10);
    for (int64_t r = 0; r < rows; ++r) {
      const auto s = static_cast<float>(
          keepNorm / (std::sqrt(static_cast<double>(vb[r])) + 1e-10));
      for (int64_t c = 0; c < cols; ++c)
        m[r * cols + c] *= s;
    }
  }
}

} // namespace dmuon::kernels
