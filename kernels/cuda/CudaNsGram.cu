// The Gram form of Newton-Schulz on cuBLAS: iterate on the s x s Gram matrix
// and touch the s x l matrix only at the ends (the algebra and the restart
// rule: kernels/cpu/NsGram.cpp and kernels/NsForms.h). One segment of
// ns::kGramRestartEvery iterations is
//
//   A = X0 X0^T                   bf16 X0, fp32 accumulate and result
//   per iteration:  A2 = A A      fp32 storage, TF32 tensor cores
//                   Q = aI + bA + cA2          (gramPolyKernel)
//                   P = Q P       (P = Q on the first iteration)
//                   A = sym(A Q Q)             skipped on the segment's last
//   X = P X0                      bf16 P and X0, fp32 accumulate
//
// Precision: the s x s iteration builds P, whose eigenvalues reach a^K on
// directions where X0 is near zero, so its rounding is amplified; it runs on
// TF32 (10-bit mantissa) rather than bf16 (7-bit). The two long-side
// products see the same bf16 operands as the three-GEMM form's. Symmetric
// products are plain GEMMs: cuBLAS has no bf16 or TF32 SYRK.
//
// Layouts (column-major view of the row-major buffers, as in CudaKernels.cu):
// a wide X0 is Xc = X0^T (l x s, ld l), a tall one is X0 itself read as
// s x l (ld s). Every s x s matrix is a polynomial in A0, so all of them are
// symmetric and commute: their layout does not matter and P Q = Q P.
#include "kernels/cuda/CudaNs.cuh"

#include "kernels/NsCoefficients.h"
#include "kernels/NsForms.h"

#include <algorithm>
#include <utility>

namespace dmuon::cuda {
namespace {

// q[b] = c a2[b] + b gram[b] + a I, s x s each.
__global__ void gramPolyKernel(const float *a2, const float *gram, float *q, int64_t s,
                               int64_t batch, float ca, float cb, float cc) {
  const int64_t ss = s * s;
  for (int64_t m = blockIdx.y; m < batch; m += gridDim.y)
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < ss;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t at = m * ss + i;
      float v = __fadd_rn(__fmul_rn(cc, a2[at]), __fmul_rn(cb, gram[at]));
      if (i / s == i % s)
        v = __fadd_rn(v, ca);
      q[at] = v;
    }
}

// a[b] = (t[b] + t[b]^T) / 2: A Q^2 is symmetric in exact arithmetic; this
// keeps rounding from making it drift.
__global__ void symmetrizeKernel(const float *t, float *a, int64_t s, int64_t batch) {
  const int64_t ss = s * s;
  for (int64_t m = blockIdx.y; m < batch; m += gridDim.y)
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < ss;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t r = i / s, c = i % s;
      a[m * ss + i] = __fmul_rn(0.5f, __fadd_rn(t[m * ss + r * s + c], t[m * ss + c * s + r]));
    }
}

__global__ void f32ToBf16Kernel(const float *in, __nv_bfloat16 *out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

// C = A B for batches of s x s fp32 matrices on TF32 tensor cores.
Result squareProduct(Context *ctx, const NsShape &sh, const float *a, const float *b, float *c) {
  const int64_t s = sh.s, ss = s * s;
  return gemmEx(ctx, sh.batch, CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, 1.0f, a, s, ss, b, s, ss, 0.0f,
                c, s, ss, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32);
}

// gram = X X^T of the bf16 s x l iterate, in fp32.
Result gramOf(Context *ctx, const NsShape &sh, const __nv_bfloat16 *x, float *gram) {
  const int64_t s = sh.s, l = sh.l, sl = s * l, ss = s * s;
  if (sh.tall)
    return gemmEx(ctx, sh.batch, CUBLAS_OP_N, CUBLAS_OP_T, s, s, l, 1.0f, x, s, sl, x, s, sl,
                  0.0f, gram, s, ss, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F);
  return gemmEx(ctx, sh.batch, CUBLAS_OP_T, CUBLAS_OP_N, s, s, l, 1.0f, x, l, sl, x, l, sl, 0.0f,
                gram, s, ss, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F);
}

// dst = P X0 (wide) or X0 P^T (tall), in the layout of `out`; P in bf16.
Result applyP(Context *ctx, const NsShape &sh, const __nv_bfloat16 *p, const __nv_bfloat16 *x0,
              void *dst, cudaDataType_t dstType) {
  const int64_t s = sh.s, l = sh.l, sl = s * l, ss = s * s;
  if (sh.tall)
    return gemmEx(ctx, sh.batch, CUBLAS_OP_N, CUBLAS_OP_N, s, l, s, 1.0f, p, s, ss, x0, s, sl,
                  0.0f, dst, s, sl, CUDA_R_16BF, dstType, CUBLAS_COMPUTE_32F);
  return gemmEx(ctx, sh.batch, CUBLAS_OP_N, CUBLAS_OP_N, l, s, s, 1.0f, x0, l, sl, p, s, ss, 0.0f,
                dst, l, sl, CUDA_R_16BF, dstType, CUBLAS_COMPUTE_32F);
}

} // namespace

Result nsRunGram(Context *ctx, float *out, const NsShape &sh, int steps, NsCoefficients set,
                 const NsBuffers &w) {
  const bool pe = set == NsCoefficients::PolarExpress;
  const int64_t ss = sh.s * sh.s;
  const dim3 perSquare(static_cast<unsigned>(std::min<int64_t>(blocksFor(ss), 4096)),
                       static_cast<unsigned>(std::min<int64_t>(sh.batch, 65535)));
  __nv_bfloat16 *x0 = w.x, *next = w.y;
  float *gram = w.gram, *q = w.q, *p = w.p, *product = w.product;

  const int segmentLength =
      kernels::ns::kGramRestartEvery > 0 ? kernels::ns::kGramRestartEvery : steps;
  for (int first = 0; first < steps; first += segmentLength) {
    const int end = std::min(steps, first + segmentLength);
    DMUON_RESULT_TRY(gramOf(ctx, sh, x0, gram));
    for (int k = first; k < end; ++k) {
      float a, b, c;
      kernels::ns::coefficients(pe, k, a, b, c);
      DMUON_RESULT_TRY(squareProduct(ctx, sh, gram, gram, product));
      gramPolyKernel<<<perSquare, kThreads, 0, ctx->stream>>>(product, gram, q, sh.s, sh.batch,
                                                             a, b, c);
      DMUON_LAUNCH_CHECK("launching the Gram polynomial kernel");
      if (k == first) {
        std::swap(p, q); // P = Q; Q's old buffer is scratch from here
      } else {
        DMUON_RESULT_TRY(squareProduct(ctx, sh, q, p, product));
        std::swap(p, product);
      }
      if (k + 1 == end)
        break; // the next A comes from X = P X0, or is not needed
      // A <- sym(A Q^2); after the swaps Q is in q unless k == first, when
      // it is in p.
      const float *qNow = k == first ? p : q;
      float *q2 = k == first ? q : product;
      float *scratch = k == first ? product : q;
      DMUON_RESULT_TRY(squareProduct(ctx, sh, qNow, qNow, q2));
      DMUON_RESULT_TRY(squareProduct(ctx, sh, gram, q2, scratch));
      symmetrizeKernel<<<perSquare, kThreads, 0, ctx->stream>>>(scratch, gram, sh.s, sh.batch);
      DMUON_LAUNCH_CHECK("launching the symmetrize kernel");
    }
    // Only `p` must survive the segment; `product` is scratch again, and its
    // s*s fp32 hold P in bf16 for the long-side product twice over.
    auto *pBf16 = reinterpret_cast<__nv_bfloat16 *>(product);
    f32ToBf16Kernel<<<blocksFor(sh.batch * ss), kThreads, 0, ctx->stream>>>(p, pBf16,
                                                                            sh.batch * ss);
    DMUON_LAUNCH_CHECK("launching the P cast kernel");
    if (end == steps)
      return applyP(ctx, sh, pBf16, x0, out, CUDA_R_32F);
    DMUON_RESULT_TRY(applyP(ctx, sh, pBf16, x0, next, CUDA_R_16BF));
    std::swap(x0, next);
  }
  return {};
}

} // namespace dmuon::cuda
