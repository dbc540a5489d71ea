// Internal to kernels/cpu: Newton-Schulz on caller-provided scratch, so that
// the fused Muon step can carve its update buffer and the NS buffers out of
// one NsWorkspace, and the batched call one slice per thread. One function
// per form (NsForm), plus the helpers they share.
#ifndef DMUON_KERNELS_CPU_NSSCRATCH_H
#define DMUON_KERNELS_CPU_NSSCRATCH_H

#include "kernels/cpu/MuonKernels.h"

#include <functional>

namespace dmuon::kernels {

// run(i, scratch) for i in [0, batch), spread over nsBatchThreads(batch)
// threads as newtonSchulzBatched describes; `scratch` holds scratchFloats
// floats of `ws` private to the call.
void forEachInBatch(int64_t batch, int64_t scratchFloats, NsWorkspace &ws,
                    const std::function<void(int64_t, float *)> &run);

// newtonSchulz with `scratch` of nsWorkspaceFloats(rows, cols, form) floats,
// which must not overlap `in` or `out` (`out` may equal `in`).
void newtonSchulzScratch(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                         NsCoefficients set, NsForm form, float *scratch);

// The forms, for rows, cols >= 1 and steps >= 1; scratch as above.
void nsThreeGemm(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                 NsCoefficients set, float *scratch);
void nsSymmetric(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                 NsCoefficients set, float *scratch);
void nsGram(const float *in, float *out, int64_t rows, int64_t cols, int steps,
            NsCoefficients set, float *scratch);

namespace nsdetail {

// 1 / (s ||in||_F + 1e-7) for the set's safety factor s; the sum of squares
// in double.
float normalizationFactor(const float *in, int64_t n, NsCoefficients set);

// a (rows x cols) -> a^T scaled; tiled so that both sides stay in cache.
void transposeScaled(const float *in, float *out, int64_t rows, int64_t cols, float scale);

// Copies the upper triangle of the n x n row-major `a` onto its lower one
// (SYRK writes only the upper).
void mirrorUpper(float *a, int64_t n);

// a <- (a + a^T) / 2: a GEMM of two commuting symmetric matrices is
// symmetric only up to rounding, and SYRK(a) = a a^T equals a^2 only for a
// symmetric a.
void symmetrize(float *a, int64_t n);

// c <- alpha a + beta b + gamma I on the upper triangle, then mirrored: the
// polynomial of a SYRK pair (b = a a^T written upper-only).
void polyUpper(float *c, const float *a, const float *b, int64_t n, float alpha, float beta,
               float gamma);

} // namespace nsdetail
} // namespace dmuon::kernels

#endif
