// The host-side rules of the GPU path, on the CPU: the NS workspace's sizing
// (kernels/cuda/NsWorkspace.h). None of it needs CUDA or a GPU.
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

} // namespace
