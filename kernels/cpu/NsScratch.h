// Internal to kernels/cpu: Newton-Schulz on caller-provided scratch, so that
// the fused Muon step can carve its update buffer and the NS buffers out of
// one NsWorkspace.
#ifndef DMUON_KERNELS_CPU_NSSCRATCH_H
#define DMUON_KERNELS_CPU_NSSCRATCH_H

#include "kernels/cpu/MuonKernels.h"

namespace dmuon::kernels {

// newtonSchulz with `scratch` of nsWorkspaceFloats(rows, cols) floats, which
// must not overlap `in` or `out` (`out` may equal `in`).
void newtonSchulzScratch(const float *in, float *out, int64_t rows, int64_t cols, int steps,
                         NsCoefficients set, float *scratch);

} // namespace dmuon::kernels

#endif
