// The host-side rules of the GPU path, on the CPU: the NS workspace's sizing
// (kernels/cuda/NsWorkspace.h), the collective timeout clock
// (backends/nccl/CollectiveTimer.h), the NCCL CTA budget
// (backends/nccl/CtaBudget.h) and the choice of device
// (devices/cuda/DeviceChoice.h). None of it needs CUDA or a GPU.
#include "backends/nccl/CollectiveTimer.h"
#include "backends/nccl/CtaBudget.h"
#include "devices/cuda/DeviceChoice.h"
#include "kernels/cuda/NsWorkspace.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using dmuon::cuda::kNsArenaAlign;
using dmuon::cuda::MatrixShape;
using dmuon::cuda::nsAlignUp;
using dmuon::cuda::nsArenaBytesFor;
using dmuon::cuda::nsArenaLayout;
using dmuon::cuda::nsNormPartials;
using dmuon::rt::CollectiveProgress;
using dmuon::rt::CollectiveTimer;
using dmuon::rt::CtaBudget;

// ---------------------------------------------------------------------------
// NS workspace

// The layout, buffer by buffer: fp32 u and bf16 X, X' of s*l, bf16 A, B of
// s*s, double partials and float scales, each 256-byte aligned.
TEST(NsWorkspace, LayoutIsTheSumOfItsAlignedBuffers) {
  const MatrixShape m{3, 96, 160}; // s = 96, l = 160
  const size_t sl = 3 * 96 * 160, ss = 3 * 96 * 96;
  const size_t partials = 3 * static_cast<size_t>(nsNormPartials(96 * 160)) * sizeof(double);
  const size_t want = nsAlignUp(sl * 4) + 2 * nsAlignUp(sl * 2) + 2 * nsAlignUp(ss * 2) +
                      nsAlignUp(partials) + nsAlignUp(3 * sizeof(float));
  const auto with = nsArenaLayout(m, true);
  EXPECT_EQ(with.bytes, want);
  EXPECT_EQ(nsArenaLayout(m, false).bytes, want - nsAlignUp(sl * 4));
  // Offsets increase, each aligned, and the last buffer ends inside the arena.
  const size_t offsets[] = {with.u, with.x, with.y, with.a, with.b, with.partials, with.scales};
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(offsets[i] % kNsArenaAlign, 0u) << i;
    if (i > 0) {
      EXPECT_GT(offsets[i], offsets[i - 1]) << i;
    }
  }
  EXPECT_LT(with.scales, with.bytes);
  // Tall and wide are the same s x l problem.
  EXPECT_EQ(nsArenaLayout({3, 160, 96}, true).bytes, with.bytes);
}

// The Gram form keeps bf16 X0 and X' and replaces bf16 A, B with four fp32
// s x s matrices; cuBLAS has no bf16 SYRK, so Symmetric runs as ThreeGemm.
TEST(NsWorkspace, GramFormLayoutAndTheFormsTheGpuRuns) {
  using dmuon::cuda::gpuNsForm;
  using dmuon::kernels::NsForm;
  EXPECT_EQ(gpuNsForm(NsForm::Symmetric, 512, 512), NsForm::ThreeGemm);
  EXPECT_EQ(gpuNsForm(NsForm::Auto, 512, 512), NsForm::ThreeGemm);
  EXPECT_EQ(gpuNsForm(NsForm::Auto, 1024, 4096), NsForm::Gram);
  EXPECT_EQ(gpuNsForm(NsForm::Gram, 512, 512), NsForm::Gram);
  EXPECT_EQ(gpuNsForm(NsForm::ThreeGemm, 1024, 4096), NsForm::ThreeGemm);

  const MatrixShape m{2, 64, 320}; // s = 64, l = 320
  const size_t sl = 2 * 64 * 320, ss = 2 * 64 * 64;
  const size_t partials = 2 * static_cast<size_t>(nsNormPartials(64 * 320)) * sizeof(double);
  const auto gram = nsArenaLayout(m, true, NsForm::Gram);
  EXPECT_EQ(gram.bytes, nsAlignUp(sl * 4) + 2 * nsAlignUp(sl * 2) + 4 * nsAlignUp(ss * 4) +
                            nsAlignUp(partials) + nsAlignUp(2 * sizeof(float)));
  EXPECT_EQ(gram.a, 0u);
  EXPECT_EQ(gram.b, 0u);
  EXPECT_GT(gram.q, gram.gram);
  EXPECT_GT(gram.product, gram.p);
  // Auto sizes this shape for the Gram form it runs.
  EXPECT_EQ(nsArenaBytesFor(&m, 1), gram.bytes);
}

TEST(NsWorkspace, NormPartialsAreBounded) {
  EXPECT_EQ(nsNormPartials(1), 1);
  EXPECT_EQ(nsNormPartials(256 * 8), 1);
  EXPECT_EQ(nsNormPartials(256 * 8 + 1), 2);
  EXPECT_EQ(nsNormPartials(int64_t{1} << 40), dmuon::cuda::kNsMaxNormPartials);
}

// The case behind sizing by layout: a squarer matrix with fewer elements
// needs more scratch (8n + 4s^2) than a long thin one with more elements.
TEST(NsWorkspace, SizedForTheLargestLayoutNotTheLargestMatrix) {
  const MatrixShape thin{1, 64, 65536};         // 4.19M elements, s = 64
  const MatrixShape smallSquare{1, 1900, 1900}; // 3.61M elements, s = 1900
  const MatrixShape square{1, 2048, 2048};      // 4.19M elements, s = 2048
  ASSERT_GT(thin.rows * thin.cols, smallSquare.rows * smallSquare.cols);
  EXPECT_GT(nsArenaLayout(smallSquare, true).bytes, nsArenaLayout(thin, true).bytes);
  const std::vector<MatrixShape> owned = {thin, smallSquare};
  EXPECT_EQ(nsArenaBytesFor(owned.data(), owned.size()), nsArenaLayout(smallSquare, true).bytes);
  // The arena serves newtonSchulz (no u) on every shape too.
  const std::vector<MatrixShape> all = {thin, square, smallSquare};
  const size_t bytes = nsArenaBytesFor(all.data(), all.size());
  for (const MatrixShape &m : all) {
    EXPECT_GE(bytes, nsArenaLayout(m, true).bytes);
    EXPECT_GE(bytes, nsArenaLayout(m, false).bytes);
  }
  EXPECT_EQ(bytes, nsArenaLayout(square, true).bytes);
}

TEST(NsWorkspace, BatchesAndEmptyShapes) {
  const MatrixShape one{1, 128, 256}, eight{8, 128, 256};
  EXPECT_GT(nsArenaLayout(eight, true).bytes, 7 * nsArenaLayout(one, true).bytes);
  const std::vector<MatrixShape> empty = {{1, 0, 256}, {0, 128, 256}};
  EXPECT_EQ(nsArenaBytesFor(empty.data(), empty.size()), 0u);
  EXPECT_EQ(nsArenaBytesFor(nullptr, 0), 0u);
}

// ---------------------------------------------------------------------------
// Collective timeouts

using Clock = CollectiveTimer::Clock;
Clock::time_point at(double seconds) {
  return Clock::time_point{} + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(seconds));
}

// Time spent queued behind compute never counts.
TEST(CollectiveTimer, QueuedTimeDoesNotCount) {
  CollectiveTimer t;
  EXPECT_FALSE(t.expired(CollectiveProgress::Queued, at(0), 1.0));
  EXPECT_FALSE(t.expired(CollectiveProgress::Queued, at(100), 1.0));
  EXPECT_FALSE(t.started());
  EXPECT_FALSE(t.expired(CollectiveProgress::Running, at(100.5), 1.0));
  EXPECT_TRUE(t.started());
  EXPECT_FALSE(t.expired(CollectiveProgress::Running, at(101.4), 1.0));
  EXPECT_TRUE(t.expired(CollectiveProgress::Running, at(101.6), 1.0));
}

// Once seen running, the clock keeps going even if a later look is coarse.
TEST(CollectiveTimer, ClockStartsAtTheFirstRunningLook) {
  CollectiveTimer t;
  EXPECT_FALSE(t.expired(CollectiveProgress::Running, at(10), 2.0));
  EXPECT_FALSE(t.expired(CollectiveProgress::Queued, at(11), 2.0));
  EXPECT_TRUE(t.expired(CollectiveProgress::Queued, at(12.5), 2.0));
}

TEST(CollectiveTimer, FinishedOrNoTimeoutNeverExpires) {
  CollectiveTimer t;
  EXPECT_FALSE(t.expired(CollectiveProgress::Running, at(0), 1.0));
  EXPECT_FALSE(t.expired(CollectiveProgress::Finished, at(50), 1.0));
  CollectiveTimer forever;
  EXPECT_FALSE(forever.expired(CollectiveProgress::Running, at(0), 0.0));
  EXPECT_FALSE(forever.expired(CollectiveProgress::Running, at(1e6), 0.0));
}

// ---------------------------------------------------------------------------
// NCCL CTA budget

// H200: 132 SMs; the planned communicators' CTAs fit together.
TEST(CtaBudget, PlannedCommunicatorsFitTheDevice) {
  CtaBudget b(132);
  for (int i = 0; i < dmuon::rt::kPlannedCommunicators; ++i)
    EXPECT_EQ(b.next(), 16) << i;
  EXPECT_LE(b.granted(), 132);
}

TEST(CtaBudget, SmallAndLargeDevices) {
  CtaBudget small(6);
  for (int i = 0; i < dmuon::rt::kPlannedCommunicators; ++i)
    EXPECT_EQ(small.next(), 1) << i; // never 0: NCCL needs one
  CtaBudget huge(1024);
  EXPECT_EQ(huge.next(), dmuon::rt::kNcclMaxCtasCeiling);
}

// Past the plan, later communicators get what is left, then one CTA each.
TEST(CtaBudget, BeyondThePlanTakesTheLeftovers) {
  CtaBudget b(100); // share 12, 8 * 12 = 96, 4 left
  for (int i = 0; i < dmuon::rt::kPlannedCommunicators; ++i)
    EXPECT_EQ(b.next(), 12);
  EXPECT_EQ(b.next(), 4);
  EXPECT_EQ(b.granted(), 100);
  EXPECT_EQ(b.next(), 1);
}

// ---------------------------------------------------------------------------
// Device choice

TEST(DeviceChoice, DefaultIsTheCommunicatorsDevice) {
  int device = -7;
  ASSERT_TRUE(dmuon::rt::resolveDevice(-1, 3, 3, device).isOk());
  EXPECT_EQ(device, 3);
  ASSERT_TRUE(dmuon::rt::resolveDevice(2, 2, 2, device).isOk());
  EXPECT_EQ(device, 2);
}

TEST(DeviceChoice, DisagreementsAreRefused) {
  int device = -7;
  // Local rank 1 left options.device at 0: refused, not moved to GPU 0.
  dmuon::rt::Status s = dmuon::rt::resolveDevice(0, 1, 1, device);
  EXPECT_EQ(s.code(), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("options.device is 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("device 1"), std::string::npos) << s.message();
  s = dmuon::rt::resolveDevice(-1, 1, 0, device);
  EXPECT_EQ(s.code(), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("options.stream belongs to device 0"), std::string::npos)
      << s.message();
  EXPECT_EQ(device, -7);
}

TEST(DeviceChoice, NegativeOrdinalIsRefusedBeforeCuda) {
  EXPECT_TRUE(dmuon::rt::checkDeviceOption(-1).isOk());
  EXPECT_TRUE(dmuon::rt::checkDeviceOption(0).isOk());
  const dmuon::rt::Status s = dmuon::rt::checkDeviceOption(-2);
  EXPECT_EQ(s.code(), DMUON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("options.device is -2"), std::string::npos) << s.message();
}

} // namespace
