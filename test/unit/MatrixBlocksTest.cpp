// Matrices orthogonalized as blocks (matrix-blocks.toml): 10 steps on one
// loopback rank against Muon and NorMuon written again here in double with
// Newton-Schulz on each block apart (the CPU kernel's NS), each block at its
// own lr scale; the 4-
// and 2x2-rank runs bit-identical to the 1-rank run; the NS flops each rank
// counts equal to the plan's.
#include "OptimizerReferences.h"
#include "SliceTraining.h"
#include "kernels/cpu/MuonKernels.h"

#include "common/RankRows.h"

#include "kernels/LrScale.h"

#include <algorithm>
#include <cmath>

using namespace dmuon::rt;

namespace {

float valueOf(int param, int step, int64_t i) {
  return 0.01f * std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(param) +
                          0.71f * static_cast<float>(step)) +
         0.003f * std::cos(0.11f * static_cast<float>(i * (param + 2)) + static_cast<float>(step));
}

std::unique_ptr<LoadedPlan> blocksPlan(const std::string &mesh) {
  return loadPlan(std::string(DMUON_BLOCKS_PLAN_DIR) + "/blocks-" + mesh + ".plan");
}

struct BlockView {
  int64_t row0, col0, rows, cols;
};

// The blocks of a rows x cols matrix, as the plan gives them (one: whole).
std::vector<BlockView> blocksOf(const dmuon::plan::Param &p, bool split) {
  const int64_t rows = p.rows(), cols = p.cols();
  if (!split || !p.block_sizes())
    return {{0, 0, rows, cols}};
  std::vector<BlockView> out;
  int64_t at = 0;
  for (int64_t size : *p.block_sizes()) {
    out.push_back(p.block_dim() == dmuon::plan::BlockDim::rows ? BlockView{at, 0, size, cols}
                                                               : BlockView{0, at, rows, size});
    at += size;
  }
  return out;
}

// NS by the CPU kernel Muon runs, on the momentum as its kernel forms it
// (both checked against double on their own in NsKernelsTest and
// StepKernelsTest): NS amplifies an input's rounding in its small singular
// directions (the quintic's slope at 0 is 3.4, per iteration), so a double
// momentum would leave the test a margin of 1.4x under the 1e-5 bound. What
// is new here, where the blocks lie, NorMuon's rows and each block's scale,
// is in double.
std::vector<double> orthogonalized(const std::vector<float> &x, int64_t rows, int64_t cols,
                                   int steps) {
  std::vector<float> f = x;
  dmuon::kernels::NsWorkspace ws;
  dmuon::kernels::newtonSchulz(f.data(), f.data(), rows, cols, steps,
                               dmuon::kernels::NsCoefficients::Original, ws,
                               dmuon::kernels::NsForm::ThreeGemm);
  return {f.begin(), f.end()};
}

// Param i of the plan after `steps` steps, by hand: Nesterov momentum, NS
// on every block of every batch matrix, NorMuon's rows, then
// each block at lr * lrScale(block) with decoupled decay. `split` false
// runs the whole matrix (what the blocks must differ from).
std::vector<double> byHand(const LoadedPlan &plan, int i, int steps, bool split) {
  const dmuon::plan::Param &p = plan.param(i);
  const dmuon::plan::OptimizerDefaults &od = *plan.root().options()->optimizer();
  const bool normuon = p.matrix_optimizer() == dmuon::plan::MatrixOptimizer::normuon;
  const int64_t rows = p.rows(), cols = p.cols(), n = rows * cols, batch = p.batch();
  const double lr = od.lr(), mu = od.momentum(), wd = od.weight_decay();
  dmuon::kernels::MuonHyper h;
  h.momentum = static_cast<float>(mu);
  h.nesterov = od.nesterov();
  std::vector<double> w(static_cast<size_t>(batch * n)), v(static_cast<size_t>(batch * rows), 0.0);
  std::vector<float> m(w.size(), 0.f);
  for (size_t k = 0; k < w.size(); ++k)
    w[k] = 10 * valueOf(i, -1, static_cast<int64_t>(k));
  const std::vector<BlockView> blocks = blocksOf(p, split);
  for (int step = 0; step < steps; ++step) {
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k)
        g[k] = valueOf(i, step, b * n + k);
      dmuon::kernels::muonMomentum(m.data() + b * n, g.data(), u.data(), n, h);
      std::vector<double> o(static_cast<size_t>(n));
      for (const BlockView &blk : blocks) {
        std::vector<float> x(static_cast<size_t>(blk.rows * blk.cols));
        for (int64_t r = 0; r < blk.rows; ++r)
          for (int64_t c = 0; c < blk.cols; ++c)
            x[r * blk.cols + c] = u[(blk.row0 + r) * cols + blk.col0 + c];
        const std::vector<double> y = orthogonalized(x, blk.rows, blk.cols, od.ns_steps());
        for (int64_t r = 0; r < blk.rows; ++r)
          for (int64_t c = 0; c < blk.cols; ++c)
            o[(blk.row0 + r) * cols + blk.col0 + c] = y[r * blk.cols + c];
      }
      if (normuon) {
        std::vector<double> vb(v.begin() + b * rows, v.begin() + (b + 1) * rows);
        dmuon::ref::normuonReference(o, vb, rows, cols, od.normuon_beta2());
        std::copy(vb.begin(), vb.end(), v.begin() + b * rows);
      }
      for (const BlockView &blk : blocks) {
        const double scale = dmuon::kernels::lrScale(blk.rows, blk.cols, false);
        for (int64_t r = 0; r < blk.rows; ++r)
          for (int64_t c = 0; c < blk.cols; ++c) {
            const int64_t k = (blk.row0 + r) * cols + blk.col0 + c;
            double &wk = w[static_cast<size_t>(b * n + k)];
            wk = wk * (1 - lr * wd) - lr * scale * o[k];
          }
      }
    }
  }
  return w;
}

double worstDiff(const std::vector<float> &got, const std::vector<double> &want) {
  double worst = 0;
  for (size_t k = 0; k < want.size(); ++k)
    worst = std::max(worst, std::fabs(got[k] - want[k]));
  return worst;
}

constexpr int kSteps = 10;

TEST(MatrixBlocks, BlockedMatricesEndWhereTheirReferencesAndOneRankEnd) {
  std::unique_ptr<LoadedPlan> one = blocksPlan("1");
  ASSERT_TRUE(one);
  ASSERT_EQ(one->root().options()->optimizer()->ns_coefficients(),
            dmuon::plan::NsCoefficients::original);
  const std::vector<std::vector<float>> want = trainWith(*one, {kSteps, 0, "", ""}, valueOf);
  int blocked = 0, inProj = 0;
  for (int i = 0; i < one->numParams(); ++i) {
    const dmuon::plan::Param &p = one->param(i);
    if (p.role() != dmuon::plan::Role::muon)
      continue;
    const std::vector<double> ref = byHand(*one, i, kSteps, true);
    double largest = 0;
    for (double x : ref)
      largest = std::max(largest, std::fabs(x));
    const double worst = worstDiff(want[static_cast<size_t>(i)], ref);
    EXPECT_LT(worst, 1e-5 * largest) << p.name()->str();
    if (!p.block_sizes())
      continue;
    ++blocked;
    inProj += p.block_source() == dmuon::plan::BlockSource::in_proj;
    // Not vacuous: the whole matrix orthogonalized at once ends elsewhere.
    const std::vector<double> whole = byHand(*one, i, kSteps, false);
    EXPECT_GT(worstDiff(want[static_cast<size_t>(i)], whole), 100 * worst + 1e-4 * largest)
        << p.name()->str() << " ends where its whole matrix would";
  }
  EXPECT_EQ(blocked, 14); // seven blocked matrices per layer
  EXPECT_EQ(inProj, 2);   // attn.in_proj_weight, by default
  for (const char *mesh : {"4", "2x2"}) {
    std::unique_ptr<LoadedPlan> plan = blocksPlan(mesh);
    ASSERT_TRUE(plan);
    const std::vector<std::vector<float>> got = trainWith(*plan, {kSteps, 0, "", ""}, valueOf);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << mesh << ": " << one->param(static_cast<int>(i)).name()->str();
  }
}

// Blocks of matrices sharded over tp: gathered whole, blocks orthogonalized,
// scattered back; the same as one rank, where nothing is gathered.
TEST(MatrixBlocks, GatheredBlocksEndWhereTheirReferencesAndOneRankEnd) {
  std::unique_ptr<LoadedPlan> one = blocksPlan("tp-1");
  std::unique_ptr<LoadedPlan> tp = blocksPlan("tp-2x2");
  ASSERT_TRUE(one && tp);
  const std::vector<std::vector<float>> want = trainSlices(*one, kSteps, valueOf);
  const std::vector<std::vector<float>> got = trainSlices(*tp, kSteps, valueOf);
  int gathered = 0;
  for (int i = 0; i < one->numParams(); ++i) {
    const dmuon::plan::Param &p = one->param(i);
    EXPECT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << p.name()->str();
    if (p.role() != dmuon::plan::Role::muon)
      continue;
    ASSERT_TRUE(p.block_sizes()) << p.name()->str();
    gathered += tp->param(i).group() == dmuon::plan::ShardingGroupKind::comm;
    const std::vector<double> ref = byHand(*one, i, kSteps, true);
    double largest = 0;
    for (double x : ref)
      largest = std::max(largest, std::fabs(x));
    EXPECT_LT(worstDiff(want[static_cast<size_t>(i)], ref), 1e-5 * largest) << p.name()->str();
  }
  EXPECT_EQ(gathered, 3);
}

// The NS flops each rank counts in a step are the plan's (its rank figures):
// blocks priced as they run, on the owner or the rank of its tp group that
// orthogonalizes a gathered matrix.
TEST(MatrixBlocks, CountedNsFlopsAreThePlans) {
  for (const char *mesh : {"1", "4", "2x2", "tp-2x2"}) {
    std::unique_ptr<LoadedPlan> plan = blocksPlan(mesh);
    ASSERT_TRUE(plan);
    runWorld(*plan, [&](int rank, Executor &ex) {
      bindAll(*plan, ex, valueOf);
      auto addGradients = [&](int, int) {};
      trainSteps(*plan, ex, rank, 1, addGradients);
      const dmuon::plan::RankFigures *figures = dmuon::common::RankRows(plan->root()).ofRank(rank);
      ASSERT_TRUE(figures);
      const double planned = figures->ns_flops();
      EXPECT_DOUBLE_EQ(ex.nsFlops(), planned) << mesh << " rank " << rank;
    });
  }
}

} // namespace
