// GPU kernels of the optimizer step, all enqueued on a caller's stream:
// Newton-Schulz with cuBLAS (bf16 inputs, fp32 accumulate), the fused Muon
// momentum/decay/update on the fp32 master, AdamW, and the casts between
// fp32 masters and packed broadcast buffers. Plain C++ interface (no CUDA
// headers needed to include it) so the runtime can call it from .cpp files.
#ifndef DMUON_KERNELS_CUDA_CUDAKERNELS_H
#define DMUON_KERNELS_CUDA_CUDAKERNELS_H

#include "kernels/Hyper.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace dmuon::cuda {

// 0 = success; otherwise the message describes the CUDA/cuBLAS failure.
// code: the cudaError_t for CUDA failures, the cublasStatus_t for cuBLAS
// failures, -1 for invalid arguments (null context, negative sizes, a matrix
// side cuBLAS cannot address).
struct Result {
  int code = 0;
  std::string message;
  bool ok() const { return code == 0; }
};

// The hyper-parameter structs and enums are the CPU kernels' own.
using kernels::AdamWHyper;
using kernels::MatrixShape;
using kernels::MuonHyper;
using kernels::NsForm;
using kernels::NsCoefficients;
using kernels::PackedType;

// Per-runtime GPU state: a cuBLAS handle bound to the stream and the NS
// workspaces, allocated once and grown only when a larger matrix arrives.
// Not thread-safe: one host thread drives a context at a time. Every call
// makes `device` current for its duration and restores the caller's device.
class Context;

// `stream` is a cudaStream_t passed as void* (nullptr = the legacy default
// stream). On failure *out is nullptr.
Result createContext(int device, void *stream, Context **out);
// Waits for the stream, then frees the workspaces and the cuBLAS handle.
void destroyContext(Context *ctx);

// Sizes the workspaces for newtonSchulz/muonStep on batch x rows x cols up
// front (optional: they grow on demand, which synchronizes the stream and the
// device before freeing the old buffer).
Result reserveWorkspace(Context *ctx, int64_t batch, int64_t rows, int64_t cols);
// The same for every shape a caller will run (the arena's size depends on the
// shape, not just the element count: NsWorkspace.h), so that no step grows it.
Result reserveWorkspace(Context *ctx, const MatrixShape *shapes, size_t count);
// Device bytes the context holds: NS/Muon scratch plus the cuBLAS workspace.
int64_t workspaceBytes(const Context *ctx);
// Waits for the context's stream and reports any asynchronous error.
Result synchronize(Context *ctx);

// Frobenius-normalize, transpose tall matrices, run `steps` iterations of
// X <- aX + (bA + cA^2)X with bf16 operands and fp32 accumulation, write the
// fp32 result. `in`/`out` are device pointers to batch x rows x cols fp32
// (row-major); `out` may equal `in`. Asynchronous on the stream; the last
// iteration accumulates straight into the fp32 `out`.
// `form`: the NS form (kernels/NsForms.h); Auto picks per shape. cuBLAS has
// no bf16 SYRK, so Symmetric runs as ThreeGemm here (gpuNsForm in
// NsWorkspace.h); muonStep runs h.nsForm the same way.
Result newtonSchulz(Context *ctx, const float *in, float *out, int64_t batch, int64_t rows,
                    int64_t cols, int steps, NsCoefficients set,
                    kernels::NsForm form = kernels::NsForm::Auto);

// buf <- mu*buf + g (EMA form: mu*buf + (1-mu)*g); u = nesterov ? g + mu*buf
// (EMA: (1-mu)*g + mu*buf) : buf; p <- p*(1-lr*wd);
// p <- p - lr*scale*NS(u). Same semantics as kernels/cpu/MuonKernels.h.
Result muonStep(Context *ctx, float *param, float *momentum, const float *grad, int64_t batch,
                int64_t rows, int64_t cols, const MuonHyper &h);

// The halves of muonStep around NS (see kernels/cpu/MuonKernels.h): the
// momentum update writing the NS input `u`, and decay + update with the
// orthogonalized full rows x cols matrix's slice `ortho`.
Result muonMomentum(Context *ctx, float *momentum, const float *grad, float *u, int64_t n,
                    const MuonHyper &h);
Result muonApply(Context *ctx, float *param, const float *ortho, int64_t n, int64_t rows,
                 int64_t cols, const MuonHyper &h);

// NorMuon's per-row normalization of an orthogonalized update, in place
// (the semantics of kernels/cpu/MuonKernels.h's normuonNormalize).
Result normuonNormalize(Context *ctx, float *o, float *v, int64_t batch, int64_t rows,
                        int64_t cols, float beta2);

Result adamwStep(Context *ctx, float *param, float *m, float *v, const float *grad, int64_t n,
                 int64_t step, const AdamWHyper &h);

// dst[i] = cast(src[i]) into the packed buffer's type.
Result packCast(Context *ctx, void *dst, PackedType type, const float *src, int64_t n);
// dst[i] = src[i] * scale (fp32).
Result scaleCopy(Context *ctx, float *dst, const float *src, float scale, int64_t n);
// dst[i] = dst[i] + src[i] * scale (fp32, two roundings as on the CPU).
Result scaleAdd(Context *ctx, float *dst, const float *src, float scale, int64_t n);
// *acc += sum of x[i]^2 in double, in a fixed order (the same bits every
// run); `acc` is device memory.
Result addSumOfSquares(Context *ctx, const float *x, int64_t n, double *acc);

// Number of CUDA devices visible (0 when no driver or no GPU).
int deviceCount();

} // namespace dmuon::cuda

#endif
