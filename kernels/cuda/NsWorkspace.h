// The layout of the CUDA kernels' Newton-Schulz scratch arena (one per
// Context, see CudaKernels.cu), in plain C++ so that its sizing is unit-tested
// on the CPU (test/unit/GpuHostLogicTest.cpp) and the runtime can size the
// arena for every matrix it owns before the first step.
//
// Per matrix of s x l (s the short side) the arena holds the fp32 Muon update
// u (muonStep only), bf16 X and X' (s*l each), bf16 A and B (s*s each), the
// norm's partial sums and the scales: about 8*s*l + 4*s*s bytes. The size
// depends on the shape, not only on the element count: a square matrix needs
// more than a long thin one with more elements, so the arena is sized for the
// largest layout over all shapes, not for the largest matrix.
//
// The Gram form (CudaNsGram.cu) keeps X0 and X' in bf16 as above and adds
// four fp32 s x s matrices (Gram, Q, P and a product): 16*s*s bytes instead
// of A and B. It runs where its long side is at least ns::kGramMinAspect
// times its short one, where s*s is small next to s*l.
#ifndef DMUON_KERNELS_CUDA_NSWORKSPACE_H
#define DMUON_KERNELS_CUDA_NSWORKSPACE_H

#include "kernels/Hyper.h"
#include "kernels/NsForms.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace dmuon::cuda {

using kernels::MatrixShape;

constexpr size_t kNsArenaAlign = 256;
constexpr size_t kBf16Bytes = 2;
// The norm's first pass: threads per block, elements per thread and block,
// and at most this many blocks (partial sums) per matrix.
constexpr int kNsNormThreads = 256;
constexpr int kNsNormElementsPerThread = 8;
constexpr int kNsMaxNormPartials = 512;

inline size_t nsAlignUp(size_t n) { return (n + kNsArenaAlign - 1) / kNsArenaAlign * kNsArenaAlign; }

// Norm partial sums per matrix of n elements.
inline int nsNormPartials(int64_t n) {
  const int64_t perBlock = int64_t{kNsNormThreads} * kNsNormElementsPerThread;
  return static_cast<int>(std::clamp<int64_t>((n + perBlock - 1) / perBlock, 1, kNsMaxNormPartials));
}

// Byte offsets of each buffer in the arena and its total size. `u` is
// present only for muonStep (withU); otherwise its offset is 0 and it takes
// no room.
struct NsArenaLayout {
  size_t u = 0, x = 0, y = 0, a = 0, b = 0, partials = 0, scales = 0;
  size_t gram = 0, q = 0, p = 0, product = 0; // the Gram form's (0 otherwise)
  size_t bytes = 0;
};

// The form the CUDA kernels run for `requested` on a rows x cols matrix.
// cuBLAS has no bf16 SYRK, so the symmetric form runs as three GEMMs; Auto
// follows the CPU's rule (ns::chooseForm) otherwise.
inline kernels::NsForm gpuNsForm(kernels::NsForm requested, int64_t rows, int64_t cols) {
  const kernels::NsForm form = kernels::ns::resolveForm(requested, rows, cols);
  return form == kernels::NsForm::Gram ? form : kernels::NsForm::ThreeGemm;
}

inline NsArenaLayout nsArenaLayout(const MatrixShape &m, bool withU,
                                   kernels::NsForm form = kernels::NsForm::ThreeGemm) {
  const bool gramForm = gpuNsForm(form, m.rows, m.cols) == kernels::NsForm::Gram;
  const int64_t s = std::min(m.rows, m.cols), l = std::max(m.rows, m.cols);
  const auto sl = static_cast<size_t>(m.batch * s * l);
  const auto ss = static_cast<size_t>(m.batch * s * s);
  NsArenaLayout out;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += nsAlignUp(bytes);
    return at;
  };
  out.u = withU ? take(sl * sizeof(float)) : 0;
  out.x = take(sl * kBf16Bytes);
  out.y = take(sl * kBf16Bytes);
  if (gramForm) {
    out.gram = take(ss * sizeof(float));
    out.q = take(ss * sizeof(float));
    out.p = take(ss * sizeof(float));
    out.product = take(ss * sizeof(float));
  } else {
    out.a = take(ss * kBf16Bytes);
    out.b = take(ss * kBf16Bytes);
  }
  out.partials = take(static_cast<size_t>(m.batch * nsNormPartials(m.rows * m.cols)) * sizeof(double));
  out.scales = take(static_cast<size_t>(m.batch) * sizeof(float));
  out.bytes = off;
  return out;
}

// The arena that serves muonStep and newtonSchulz on every one of `shapes`
// in the form Auto picks for it without growing: the largest layout (with
// u), not the layout of the matrix with the most elements. Empty shapes need
// nothing. (A plan that forces another form grows the arena once.)
inline size_t nsArenaBytesFor(const MatrixShape *shapes, size_t count) {
  size_t most = 0;
  for (size_t i = 0; i < count; ++i) {
    const MatrixShape &m = shapes[i];
    if (m.batch > 0 && m.rows > 0 && m.cols > 0)
      most = std::max(most, nsArenaLayout(m, true, kernels::NsForm::Auto).bytes);
  }
  return most;
}

} // namespace dmuon::cuda

#endif
