// How many CTAs (thread blocks) each of the runtime's NCCL communicators may
// use, apart from NCCL so that it is unit-tested on the CPU
// (test/unit/GpuHostLogicTest.cpp).
//
// The runtime's communicators (its world, shard, replicate, data-parallel and
// model-parallel groups) run on different streams and overlap: phase 2 of a
// reduce with phase 1 of the next group, the async replicate broadcast with
// the next step's broadcasts. An NCCL kernel spins until its peers arrive, so
// NCCL guarantees progress for concurrent kernels only when all of them are
// resident at once; if one communicator's kernel fills the SMs on one rank
// while its peer rank runs another communicator's first, both can wait
// forever. Each communicator's maxCTAs is therefore bounded so that the
// kernels of kPlannedCommunicators communicators fit the device together,
// counting one CTA per SM (NCCL's blocks are large; this is the safe count).
// Compute kernels need no share: they finish without waiting on anyone.
#ifndef DMUON_RUNTIME_BACKENDS_NCCL_CTABUDGET_H
#define DMUON_RUNTIME_BACKENDS_NCCL_CTABUDGET_H

#include <algorithm>

namespace dmuon::rt {

// World, shard, replicate, data-parallel, and up to four model-parallel
// groups. A plan that needs more gets the SMs left over, then one CTA per
// communicator (docs/gpu.md, "NCCL communicators").
constexpr int kPlannedCommunicators = 8;
// NCCL's own default ceiling (MAXCHANNELS on current NCCL); more buys nothing.
constexpr int kNcclMaxCtasCeiling = 32;

class CtaBudget {
public:
  explicit CtaBudget(int smCount, int planned = kPlannedCommunicators)
      : remaining_(std::max(smCount, 1)),
        share_(std::clamp(std::max(smCount, 1) / std::max(planned, 1), 1, kNcclMaxCtasCeiling)) {}

  // maxCTAs for the next communicator.
  int next() {
    const int ctas = std::max(1, std::min(share_, remaining_));
    remaining_ = std::max(0, remaining_ - ctas);
    granted_ += ctas;
    return ctas;
  }
  // The CTAs of every communicator so far, all resident at once.
  int granted() const { return granted_; }

private:
  int remaining_;
  int share_;
  int granted_ = 0;
};

} // namespace dmuon::rt

#endif
