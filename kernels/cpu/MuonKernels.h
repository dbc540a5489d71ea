// CPU kernels of the optimizer step: Newton-Schulz orthogonalization with
// OpenBLAS, the fused Muon momentum/decay/update and AdamW. fp32 throughout.
// Used by the runtime's owner-only step and by tests as the reference path.
#ifndef DMUON_KERNELS_CPU_MUONKERNELS_H
#define DMUON_KERNELS_CPU_MUONKERNELS_H

#include "kernels/Hyper.h"

#include <cstdint>
#include <vector>

namespace dmuon::kernels {

// Scratch memory for NS, grown on first use and reused across steps so the
// step does not allocate.
struct NsWorkspace {
  std::vector<float> buffer;
};

// The (a, b, c) of iteration `i` (0-based) of a coefficient set.
void nsCoefficients(NsCoefficients set, int iteration, float &a, float &b, float &c);

// Number of coefficient sets; iterations at or past it reuse the last one
// (Original: 1, PolarExpress: 8).
int nsCoefficientCount(NsCoefficients set);

// Safety factor s of the normalization X = G / (s * ||G||_F + 1e-7):
// 1 for Original, 1.01 for PolarExpress (Amsel et al. 2025, Algorithm 1).
float nsNormScale(NsCoefficients set);

// Floats of NsWorkspace::buffer that newtonSchulz uses for a rows x cols
// matrix in `form` (Auto: the form kernels/NsForms.h picks for the shape).
int64_t nsWorkspaceFloats(int64_t rows, int64_t cols, NsForm form = NsForm::Auto);

// Orthogonalizes one row-major rows x cols matrix: X = G / (||G||_F + 1e-7)
// (PolarExpress: G / (1.01 * ||G||_F + 1e-7), see nsNormScale),
// transposed when rows > cols, then `steps` iterations of
// X <- aX + (bA + cA^2)X with A = X X^T. `out` may equal `in`. `form` says
// how the products are computed (kernels/Hyper.h); all forms agree to fp32
// rounding. Auto picks per shape with ns::chooseForm (kernels/NsForms.h).
void newtonSchulz(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                  NsCoefficients set, NsWorkspace &ws, NsForm form = NsForm::Auto);

// newtonSchulz on each of `batch` contiguous rows x cols matrices (a 3-D
// expert tensor, say), spread over threads: with T = nsBatchThreads(batch)
// > 1, T matrices at a time run in parallel, each on single-threaded BLAS,
// and a remainder of fewer than T runs one by one on BLAS's own threads.
// Results equal newtonSchulz's on each matrix. While the parallel part runs,
// OpenBLAS's thread count is set to 1 process-wide (restored after; calls
// from several threads share one save/restore).
void newtonSchulzBatched(const float *in, float *out, int64_t batch, int64_t rows, int64_t cols,
                         int steps, NsCoefficients set, NsWorkspace &ws,
                         NsForm form = NsForm::Auto);

// Threads the batched calls spread `batch` matrices over: min(batch, BLAS's
// thread count, OpenMP's max threads); 1 without OpenMP. With
// OPENBLAS_NUM_THREADS=1 (one MPI rank per core) batches stay sequential.
int nsBatchThreads(int64_t batch);

// sqrt(max(1, rows/cols)) or 0.2*sqrt(max(rows, cols)).
float muonLrScale(int64_t rows, int64_t cols, bool matchRmsAdamW);

// One Muon step on a batch of row-major rows x cols matrices (batch 1 for a
// plain matrix): buf <- mu*buf + g (EMA form: mu*buf + (1-mu)*g);
// u = nesterov ? g + mu*buf (EMA: (1-mu)*g + mu*buf) : buf;
// p <- p*(1 - lr*wd); p <- p - lr*scale*NS(u). NS runs in h.nsForm; the
// batch is spread over threads as in newtonSchulzBatched.
void muonStep(float *param, float *momentumBuf, const float *grad, int64_t batch,
              int64_t rows, int64_t cols, const MuonHyper &h, NsWorkspace &ws);

// The two halves of muonStep around NS, for matrices whose NS runs elsewhere
// (gathered over a model-parallel group): the momentum update producing the
// NS input u, and decay + update with the orthogonalized u of the full
// rows x cols matrix (which sets the lr scale). muonStep is exactly
// muonMomentum, newtonSchulz, muonApply.
void muonMomentum(float *buf, const float *g, float *u, int64_t n, const MuonHyper &h);
void muonApply(float *p, const float *ortho, int64_t n, int64_t rows, int64_t cols,
               const MuonHyper &h);

// NorMuon's normalization of an orthogonalized update (Li et al. 2025,
// "NorMuon"), in place on `batch` row-major rows x cols matrices `o`, with
// `v` the batch x rows running second moment per row (neuron):
//   v[r] <- beta2 v[r] + (1 - beta2) mean_c o[r,c]^2
//   o[r,:] <- o[r,:] / (sqrt(v[r]) + 1e-10)
//   o <- o * ||o before||_F / (||o after||_F + 1e-10)   (per matrix)
// so each row's step adapts to its own scale while the update keeps Muon's
// norm. Sums in double. Between newtonSchulz and muonApply.
void normuonNormalize(float *o, float *v, int64_t batch, int64_t rows, int64_t cols,
                      float beta2);

// One AdamW step (decoupled weight decay, bias-corrected); `step` counts from 1.
void adamwStep(float *param, float *m, float *v, const float *grad, int64_t n, int64_t step,
               const AdamWHyper &h);

} // namespace dmuon::kernels

#endif
