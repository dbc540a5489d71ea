// QK-Clip (MuonClip) in libdmuon on the MPI backend, under mpirun on the
// meshes 1 and 2x2, for the model of qk-clip.toml: two attention layers with
// 4-head query/key pairs and a grouped-query pair (4 query heads, 2 key
// heads). Gradients are synthetic (a hash of param, element, step and rank,
// multiples of 1/64, so their averages are exact in any summation order) and
// do not depend on the params; that makes "the clip did not touch these
// rows" comparable bit for bit across runs.
//
// Each rank reports its own per-head max logits every step; the maximum over
// ranks sits on a different rank per head, rank 0 reports in two calls (the
// runtime keeps the element-wise maximum), and one pair is not reported at
// one step. Head 0 of every pair never exceeds tau; the others do at some
// steps. Checks:
//   * 5 steps equal a single-process Muon + AdamW + QK-Clip reference within
//     1e-5 (worst max|a-b| / max|b| over params), and the heads clipped per
//     step are the reference's count;
//   * rows of heads that were never over tau are bit-identical to a run
//     where no rank reports any logit (the clip never fires), as are the
//     shared key heads of the grouped-query pair and every unpaired param;
//     rows of clipped heads differ;
//   * a skipped step (NaN in one rank's gradient) clips nothing although
//     its logits are over tau, and its maxima do not carry into the next
//     step: the run equals the reference without that step;
//   * after every step's synchronize every fp32 master copy of a Muon param
//     is bit-identical (I4): the replicate broadcast carries rescaled rows;
//   * on 2x2 at least one pair has its query and key on different owners;
//   * the plan's pair table, and set_qk_max_logits refusing a bad pair, a
//     wrong length, a null pointer and non-finite values.
//
//   mpirun -n N dmuon-qk-clip-test --plan qk-clip-<mesh>.plan
#include "MpiCheck.h"

#include "dmuon/dmuon.hpp"
#include "kernels/cpu/MuonKernels.h"

#include <mpi.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using mpicheck::fail;
using mpicheck::gRank;
using mpicheck::gWorld;
using mpicheck::info;
namespace k = dmuon::kernels;
using Params = std::vector<std::vector<float>>; // by param index

constexpr int kSteps = 5;
// The hyper-parameters compiled into the plans (CMakeLists.txt).
constexpr float kLr = 0.02f, kMomentum = 0.95f, kWd = 0.01f, kAdamwLr = 0.01f, kAdamwWd = 0.01f;

uint64_t mix(uint64_t x) { // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

float initialValue(int param, int64_t i) {
  const uint64_t h = mix(uint64_t(param) << 32 ^ uint64_t(i));
  return static_cast<float>(static_cast<int>(h % 2001) - 1000) / 10000.0f;
}

// Multiples of 1/64 in [-1, 1]: sums over ranks are exact.
float gradValue(int param, int64_t i, int step, int rank) {
  const uint64_t h = mix(mix(uint64_t(param) << 32 ^ uint64_t(i)) ^ uint64_t(step) << 8 ^
                         uint64_t(rank) << 20);
  return static_cast<float>(static_cast<int>(h % 129) - 64) / 64.0f;
}

// The largest logit of a head over all ranks: head 0 stays under tau = 100;
// the others cycle through 60, 85, 110, 135.
float globalMax(int step, int pair, int head) {
  if (head == 0)
    return 40.0f + static_cast<float>(step);
  return 60.0f + 25.0f * static_cast<float>((head + pair + step) % 4);
}

// The rank that saw the largest logit reports it; the others less.
float reportedBy(int rank, int step, int pair, int head) {
  const float m = globalMax(step, pair, head);
  return rank == (step + pair + head) % gWorld ? m : m - 30.0f - static_cast<float>(rank);
}

// Nobody reports the grouped-query pair at step 1.
bool reported(int step, int pair) { return !(step == 1 && pair == 2); }

struct Scenario {
  std::string label;
  bool logits = true;  // ranks report max logits
  int poisonStep = -1; // the last rank's gradient holds a NaN at this step
};

struct Outcome {
  Params final;
  std::vector<int64_t> clipped; // heads per step
  std::vector<int> skipped;
};

struct PairInfo {
  dmuon_qk_clip_pair_info_t info;
  bool shared() const { return info.key_heads < info.heads; }
};

class QkClipTest {
public:
  explicit QkClipTest(const dmuon::Plan &plan) : plan_(plan), tau_(plan.qkClipTau()) {
    for (int i = 0; i < plan.numParams(); ++i)
      params_.push_back(plan.param(i));
    for (int i = 0; i < plan.numQkClipPairs(); ++i)
      pairs_.push_back({plan.qkClipPair(i)});
  }

  const std::vector<PairInfo> &pairs() const { return pairs_; }
  const std::vector<dmuon_param_info_t> &params() const { return params_; }
  double tau() const { return tau_; }

  // ----------------------------------------------------------- reference

  Outcome reference(const Scenario &sc) const {
    const size_t n = params_.size();
    Params p(n), mom(n), m(n), v(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t numel = static_cast<size_t>(params_[i].numel);
      p[i].resize(numel);
      for (size_t e = 0; e < numel; ++e)
        p[i][e] = initialValue(static_cast<int>(i), static_cast<int64_t>(e));
      mom[i].assign(numel, 0.0f);
      m[i].assign(numel, 0.0f);
      v[i].assign(numel, 0.0f);
    }
    k::MuonHyper mh;
    mh.lr = kLr;
    mh.momentum = kMomentum;
    mh.weightDecay = kWd;
    k::AdamWHyper ah;
    ah.lr = kAdamwLr;
    ah.weightDecay = kAdamwWd;
    k::NsWorkspace ws;
    int64_t adamwSteps = 0;
    Outcome out;
    for (int step = 0; step < kSteps; ++step) {
      if (step == sc.poisonStep) {
        out.skipped.push_back(1);
        out.clipped.push_back(0);
        continue;
      }
      out.skipped.push_back(0);
      ++adamwSteps;
      for (size_t i = 0; i < n; ++i) {
        const dmuon_param_info_t &info = params_[i];
        std::vector<float> g(p[i].size(), 0.0f);
        for (int r = 0; r < gWorld; ++r)
          for (size_t e = 0; e < g.size(); ++e)
            g[e] += gradValue(static_cast<int>(i), static_cast<int64_t>(e), step, r);
        for (float &x : g)
          x *= 1.0f / static_cast<float>(gWorld);
        if (info.role == DMUON_ROLE_MUON)
          k::muonStep(p[i].data(), mom[i].data(), g.data(), 1, info.shape[0], info.shape[1], mh,
                      ws);
        else
          k::adamwStep(p[i].data(), m[i].data(), v[i].data(), g.data(), info.numel, adamwSteps,
                       ah);
      }
      int64_t clipped = 0;
      for (size_t pi = 0; sc.logits && pi < pairs_.size(); ++pi) {
        const PairInfo &pr = pairs_[pi];
        if (!reported(step, static_cast<int>(pi)))
          continue;
        for (int h = 0; h < pr.info.heads; ++h) {
          float mx = -std::numeric_limits<float>::infinity();
          for (int r = 0; r < gWorld; ++r)
            mx = std::max(mx, reportedBy(r, step, static_cast<int>(pi), h));
          if (!(mx > tau_))
            continue;
          ++clipped;
          const double gamma = tau_ / mx;
          const int q = pr.info.query_index, key = pr.info.key_index;
          scaleRows(p[q], q, pr.info.head_dim, h, pr.shared() ? gamma : std::sqrt(gamma));
          if (!pr.shared())
            scaleRows(p[key], key, pr.info.head_dim, h, std::sqrt(gamma));
        }
      }
      out.clipped.push_back(clipped);
    }
    out.final = std::move(p);
    return out;
  }

  // --------------------------------------------------------- distributed

  Outcome distributed(const Scenario &sc) {
    MPI_Comm comm = MPI_COMM_WORLD;
    dmuon_runtime_options_t o;
    dmuon_runtime_options_init(&o);
    o.communicator = &comm;
    dmuon::Runtime rt(plan_, o);
    for (size_t i = 0; i < params_.size(); ++i) {
      std::vector<float> v(static_cast<size_t>(params_[i].numel));
      for (size_t e = 0; e < v.size(); ++e)
        v[e] = initialValue(static_cast<int>(i), static_cast<int64_t>(e));
      rt.bindParam(params_[i].name, v.data(), params_[i].numel);
    }
    const int groups = plan_.numHookGroups();
    Outcome out;
    for (int step = 0; step < kSteps; ++step) {
      if (sc.logits)
        reportLogits(rt, step);
      for (int g = 0; g < groups; ++g) {
        rt.preForward(g);
        rt.postForward(g);
      }
      const bool poison = step == sc.poisonStep && gRank == gWorld - 1;
      for (int g = groups - 1; g >= 0; --g) {
        rt.preBackward(g);
        for (size_t i = 0; i < params_.size(); ++i)
          if (params_[i].hook_group == g)
            writeGrad(rt, static_cast<int>(i), step,
                      poison && params_[i].role == DMUON_ROLE_MUON);
        rt.postBackward(g);
      }
      // Params no hook moves (replicated) take their gradients any time.
      for (size_t i = 0; i < params_.size(); ++i)
        if (params_[i].hook_group < 0)
          writeGrad(rt, static_cast<int>(i), step, false);
      const bool applied = rt.step();
      out.skipped.push_back(!applied);
      out.clipped.push_back(rt.qkClipCounts().first);
      rt.synchronize();
      checkMastersAgree(rt, sc, step);
    }
    const auto [last, total] = rt.qkClipCounts();
    int64_t sum = 0;
    for (int64_t c : out.clipped)
      sum += c;
    if (total != sum || last != out.clipped.back())
      fail("%s: qk_clip_counts says %lld last and %lld in total; the steps said %lld and %lld",
           sc.label.c_str(), static_cast<long long>(last), static_cast<long long>(total),
           static_cast<long long>(out.clipped.back()), static_cast<long long>(sum));
    for (const dmuon_param_info_t &info : params_) {
      std::vector<float> v(static_cast<size_t>(info.numel));
      rt.gatherParam(info.name, v.data(), info.numel);
      out.final.push_back(std::move(v));
    }
    return out;
  }

private:
  // Rows [head*head_dim, (head+1)*head_dim) of param `i` times `scale`.
  void scaleRows(std::vector<float> &w, int i, int headDim, int head, double scale) const {
    const size_t n = static_cast<size_t>(headDim * params_[i].shape[1]);
    const float f = static_cast<float>(scale);
    for (size_t e = static_cast<size_t>(head) * n; e < static_cast<size_t>(head + 1) * n; ++e)
      w[e] *= f;
  }

  void reportLogits(dmuon::Runtime &rt, int step) {
    for (size_t pi = 0; pi < pairs_.size(); ++pi) {
      if (!reported(step, static_cast<int>(pi)))
        continue;
      std::vector<float> v(static_cast<size_t>(pairs_[pi].info.heads));
      for (size_t h = 0; h < v.size(); ++h)
        v[h] = reportedBy(gRank, step, static_cast<int>(pi), static_cast<int>(h));
      if (gRank == 0) { // two micro-batches: the runtime keeps the larger
        std::vector<float> lower = v;
        for (float &x : lower)
          x -= 50.0f;
        rt.setQkMaxLogits(static_cast<int>(pi), v.data(), static_cast<int64_t>(v.size()));
        rt.setQkMaxLogits(static_cast<int>(pi), lower.data(), static_cast<int64_t>(v.size()));
      } else {
        rt.setQkMaxLogits(static_cast<int>(pi), v.data(), static_cast<int64_t>(v.size()));
      }
    }
  }

  void writeGrad(dmuon::Runtime &rt, int i, int step, bool poison) {
    float *g = rt.gradView(i);
    for (int64_t e = 0; e < params_[i].numel; ++e)
      g[e] = gradValue(i, e, step, gRank);
    if (poison)
      g[0] = std::numeric_limits<float>::quiet_NaN();
  }

  // I4: every rank that keeps a master of a Muon param holds the same bytes.
  void checkMastersAgree(dmuon::Runtime &rt, const Scenario &sc, int step) {
    for (const dmuon_param_info_t &info : params_) {
      if (info.role != DMUON_ROLE_MUON)
        continue;
      const dmuon_param_state_t s = rt.paramState(info.name);
      const unsigned long long mine[2] = {static_cast<unsigned long long>(s.has_owned_data),
                                          static_cast<unsigned long long>(s.owned_checksum)};
      std::vector<unsigned long long> all(2 * static_cast<size_t>(gWorld));
      MPI_Allgather(mine, 2, MPI_UNSIGNED_LONG_LONG, all.data(), 2, MPI_UNSIGNED_LONG_LONG,
                    MPI_COMM_WORLD);
      unsigned long long first = 0;
      int holders = 0;
      for (int r = 0; r < gWorld; ++r) {
        if (!all[2 * r])
          continue;
        if (holders++ == 0)
          first = all[2 * r + 1];
        else if (all[2 * r + 1] != first)
          fail("%s: step %d: the master copies of '%s' differ (rank %d)", sc.label.c_str(), step,
               info.name, r);
      }
    }
  }

  const dmuon::Plan &plan_;
  double tau_;
  std::vector<dmuon_param_info_t> params_;
  std::vector<PairInfo> pairs_;
};

// ---------------------------------------------------------------- checks

// Worst over params of max|a - b| / max|b|.
double worstRelative(const QkClipTest &t, const Params &a, const Params &b, std::string &where) {
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    double diff = 0, scale = 0;
    for (size_t e = 0; e < b[i].size(); ++e) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[i][e]) - b[i][e]));
      scale = std::max(scale, std::fabs(static_cast<double>(b[i][e])));
    }
    const double rel = diff / std::max(scale, 1e-30);
    if (rel >= worst) {
      worst = rel;
      where = t.params()[i].name;
    }
  }
  return worst;
}

void expectMatchesReference(const QkClipTest &t, const char *label, const Outcome &got,
                            const Outcome &want) {
  std::string where;
  const double rel = worstRelative(t, got.final, want.final, where);
  if (!(rel <= 1e-5))
    fail("%s: worst param relative error %.3g (%s) vs the single-process reference, over 1e-5",
         label, rel, where.c_str());
  else
    info("%s: worst param relative error %.3g (%s) vs the single-process reference", label, rel,
         where.c_str());
  if (got.clipped != want.clipped || got.skipped != want.skipped)
    fail("%s: heads clipped or steps skipped differ from the reference", label);
  std::string counts;
  for (int64_t c : got.clipped)
    counts += (counts.empty() ? "" : ",") + std::to_string(c);
  info("%s: heads clipped per step %s (reference the same)", label, counts.c_str());
}

bool sameBits(const float *a, const float *b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Rows of heads never over tau equal, bit for bit, the run without logits;
// rows of clipped heads do not; everything the clip does not own is equal.
void expectUntouched(const QkClipTest &t, const std::string &mesh, const Outcome &clip,
                     const Outcome &plain) {
  std::vector<bool> paired(t.params().size(), false);
  int untouched = 0, changed = 0;
  for (size_t pi = 0; pi < t.pairs().size(); ++pi) {
    const dmuon_qk_clip_pair_info_t &pr = t.pairs()[pi].info;
    paired[pr.query_index] = paired[pr.key_index] = true;
    for (int h = 0; h < pr.heads; ++h) {
      bool over = false;
      for (int s = 0; s < kSteps; ++s)
        over |= reported(s, static_cast<int>(pi)) && globalMax(s, static_cast<int>(pi), h) > t.tau();
      std::vector<int> sides{pr.query_index};
      if (!t.pairs()[pi].shared())
        sides.push_back(pr.key_index);
      for (int i : sides) {
        const size_t n = static_cast<size_t>(pr.head_dim * t.params()[i].shape[1]);
        const bool same = sameBits(clip.final[i].data() + h * n, plain.final[i].data() + h * n, n);
        if (!over && !same)
          fail("[%s] '%s' head %d was never over tau but its rows changed", mesh.c_str(),
               t.params()[i].name, h);
        if (over && same)
          fail("[%s] '%s' head %d was over tau but its rows were not rescaled", mesh.c_str(),
               t.params()[i].name, h);
        (over ? changed : untouched) += 1;
      }
    }
    if (t.pairs()[pi].shared()) { // the shared key heads: never touched
      const std::vector<float> &a = clip.final[pr.key_index], &b = plain.final[pr.key_index];
      if (!sameBits(a.data(), b.data(), a.size()))
        fail("[%s] the grouped-query key '%s' changed", mesh.c_str(), pr.key);
      ++untouched;
    }
  }
  for (size_t i = 0; i < paired.size(); ++i)
    if (!paired[i] &&
        !sameBits(clip.final[i].data(), plain.final[i].data(), clip.final[i].size()))
      fail("[%s] '%s' is in no pair but changed", mesh.c_str(), t.params()[i].name);
  info("%s %d head row blocks never over tau (and shared keys) bit-identical to the run "
       "without logits; %d clipped blocks differ",
       mesh.c_str(), untouched, changed);
}

void checkPlanTable(const dmuon::Plan &plan) {
  if (plan.numQkClipPairs() != 3 || plan.qkClipTau() != 100.0) {
    fail("the plan has %d qk_clip pairs and tau %g; expected 3 and 100", plan.numQkClipPairs(),
         plan.qkClipTau());
    return;
  }
  const dmuon_qk_clip_pair_info_t a = plan.qkClipPair(0), g = plan.qkClipPair(2);
  if (std::string(a.query) != "layers.0.attn.q.weight" ||
      std::string(a.key) != "layers.0.attn.k.weight" || a.heads != 4 || a.key_heads != 4 ||
      a.head_dim != 8 || a.query_index != plan.findParam(a.query))
    fail("qk_clip pair 0 reads %s / %s heads %d key_heads %d head_dim %d", a.query, a.key,
         a.heads, a.key_heads, a.head_dim);
  if (std::string(g.key) != "gqa.k.weight" || g.heads != 4 || g.key_heads != 2)
    fail("qk_clip pair 2 reads %s heads %d key_heads %d", g.key, g.heads, g.key_heads);
  auto out = dmuon::versioned<dmuon_qk_clip_pair_info_t>(DMUON_QK_CLIP_PAIR_INFO_VERSION);
  if (dmuon_plan_qk_clip_pair(plan.get(), 3, &out) != DMUON_ERROR_INVALID_ARGUMENT)
    fail("qk_clip pair 3 of 3 was not refused");
  int distinct = 0;
  for (int i = 0; i < plan.numQkClipPairs(); ++i) {
    const dmuon_qk_clip_pair_info_t p = plan.qkClipPair(i);
    distinct += plan.param(p.query_index).owner_rank != plan.param(p.key_index).owner_rank;
  }
  if (gWorld > 1 && distinct == 0)
    fail("no pair has its query and key on different owners; the test wants both cases");
  info("plan: 3 qk_clip pairs, tau 100; %d of them with query and key on different owners",
       distinct);
}

void checkRefusals(const dmuon::Plan &plan) {
  MPI_Comm comm = MPI_COMM_WORLD;
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.communicator = &comm;
  dmuon::Runtime rt(plan, o);
  const float four[4] = {1, 2, 3, 4};
  const float nan[4] = {1, std::numeric_limits<float>::quiet_NaN(), 3, 4};
  const float inf[4] = {1, 2, std::numeric_limits<float>::infinity(), 4};
  struct Case {
    const char *what;
    int pair;
    const float *values;
    int64_t count;
    const char *message;
  } cases[] = {{"pair -1", -1, four, 4, "out of range"},
               {"pair 3", 3, four, 4, "out of range"},
               {"3 values", 0, four, 3, "got 3 values"},
               {"null", 1, nullptr, 4, "is null"},
               {"NaN", 2, nan, 4, "max_logits[1]"},
               {"Inf", 2, inf, 4, "max_logits[2]"}};
  for (const Case &c : cases) {
    const dmuon_status_t st = dmuon_runtime_set_qk_max_logits(rt.get(), c.pair, c.values, c.count);
    const std::string msg = dmuon_runtime_last_error(rt.get());
    if (st != DMUON_ERROR_INVALID_ARGUMENT || msg.find(c.message) == std::string::npos)
      fail("set_qk_max_logits with %s: status %d, message '%s'", c.what, st, msg.c_str());
  }
  if (dmuon_runtime_set_qk_max_logits(rt.get(), 0, four, 4) != DMUON_SUCCESS)
    fail("set_qk_max_logits refused a good call after bad ones: %s",
         dmuon_runtime_last_error(rt.get()));
  info("set_qk_max_logits refuses a bad pair, a wrong length, null and non-finite values");
}

int runTests(int argc, char **argv) {
  const std::string planPath =
      mpicheck::planArgument(argc, argv, "dmuon-qk-clip-test --plan qk-clip-<mesh>.plan");
  if (planPath.empty())
    return 2;
  const dmuon::Plan plan(planPath);
  const std::string mesh = "[" + planPath.substr(planPath.find_last_of('/') + 1) + "]";
  checkPlanTable(plan);
  QkClipTest t(plan);

  const Scenario clip{mesh + " logits over tau", true, -1};
  const Outcome got = t.distributed(clip);
  expectMatchesReference(t, clip.label.c_str(), got, t.reference(clip));

  const Scenario plain{mesh + " no logits reported", false, -1};
  const Outcome none = t.distributed(plain);
  expectMatchesReference(t, plain.label.c_str(), none, t.reference(plain));
  expectUntouched(t, mesh, got, none);

  const Scenario skip{mesh + " step 2 skipped (NaN)", true, 2};
  const Outcome skipped = t.distributed(skip);
  expectMatchesReference(t, skip.label.c_str(), skipped, t.reference(skip));

  checkRefusals(plan);
  return 0;
}

} // namespace

int main(int argc, char **argv) { return mpicheck::runMain(argc, argv, runTests); }
