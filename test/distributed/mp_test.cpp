// Model-parallel Muon params in libdmuon on the MPI backend, run
// under mpirun by ctest on meshes with a model-parallel dim:
// dp_shard=2,tp=2 (4 ranks), dp_replicate=2,dp_shard=2,tp=2 and
// dp_shard=4,ep=2 (8 ranks).
//
// The model (mp-tp.toml / mp-ep.toml), in plain C++ below, per row b:
//   h      = embed · x_b                                   embed.weight [D, I]   adamw
//   for l in 0..L-1 (layers.l):
//     n    = rmsnorm(h) ⊙ norm                             norm.weight  [D]      adamw
//     z    = silu(up · n)                                  up.weight    [H, D]   tp Shard(0)
//     h    = h + down · z                                  down.weight  [D, H]   tp Shard(1)
//   e      = (global row index) mod E   (a fixed router)
//   h      = h + W_eᵀ silu(W_e · h)                        moe.experts.w [E,F,D] tp/ep Shard(0)
//   y      = head · h                                      head.weight  [O, D]   adamw
//   loss   = mean over rows and outputs of (y − t)²
//
// Model parallelism on the host is simulated honestly: the runtime holds only
// each rank's local shards; for forward a rank reassembles the full params by
// MPI_Allgather of its local param views over its model-parallel group (the
// ranks that differ only in the tp/ep coordinate), runs the full forward and
// backward on its data-parallel slice of the global batch (the ranks of one
// model-parallel group share the slice), and writes its local slice of each
// gradient into the runtime's grad views.
//
// Checks, over 10-step runs:
//   * after every step, per model-parallel coordinate: I1 (is_owner iff the
//     rank's (shard, replicate) is the owner slot: every model-parallel
//     coordinate of the slot owns), I2 (owned data on the owner's shard
//     column), I3 (after finish_backward only owners hold reduced grads), I4
//     (after synchronize the owned checksums agree down each shard column at
//     the same model-parallel coordinate);
//   * per step, the bytes each rank sent and received per collective kind
//     (gather and scatter included) equal dmuon_runtime_planned_counters, and
//     the plan's figures agree with what the param table and the accounting
//     rule of docs/plan-format.md give;
//   * after 10 steps every param, reassembled from its shards (gather_param
//     on each rank, then MPI_Allgather over the model-parallel group,
//     concatenated along the sharded dim), equals a single-process Muon+AdamW
//     run of the full model on the full global batch within 1e-4 relative
//     (max abs diff / max abs value); the loss at step 0 agrees within 1e-6;
//   * Z2/sync and async without synchronize between steps give bit-identical
//     losses and params to Z3/async;
//   * bind_param / gather_param of a sharded param with its global numel are
//     refused (INVALID_ARGUMENT): the runtime takes and gives local shards.
//
// usage: mpirun -n N dmuon-mp-test --plan P --layout tp|ep|ep-strided|cp|vocab
// The layout names which params are sharded on the model-parallel dim:
//   tp: layers.N.up.weight on tensor dim 0, layers.N.down.weight on dim 1,
//       moe.experts.w on dim 0;  ep: moe.experts.w on dim 0;
//   vocab (mp-vocab.toml): as tp, with a GPT-2-sized head [50257, D] (Muon)
//       and head.bias (AdamW) on dim 0 and 5 experts, all split unevenly
//       over tp = 2 (torch.chunk: 25129 + 25128 rows, 3 + 2 experts).
// Exits 0 when every check passed on every rank; failures are printed as
// "rank R: FAIL: ..." lines.
#include "MpRuns.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

// ------------------------------------------------------------ comparisons
using mpicheck::bits;

void expectIdentical(const char *what, const Trajectory &a, const Trajectory &b,
                     const std::string &mesh) {
  const int before = gFailures;
  int bad = 0;
  for (size_t i = 0; i < a.losses.size() && i < b.losses.size(); ++i)
    if (bits(a.losses[i]) != bits(b.losses[i]) && bad++ < 3)
      fail("[%s] %s: loss at step %zu differs: %.9g vs %.9g", mesh.c_str(), what, i,
           static_cast<double>(a.losses[i]), static_cast<double>(b.losses[i]));
  for (const auto &[name, va] : a.final) {
    const std::vector<float> &vb = b.final.at(name);
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < va.size(); ++i)
      if (bits(va[i]) != bits(vb[i]) && diff++ == 0)
        first = i;
    if (diff)
      fail("[%s] %s: %s differs in %zu of %zu elements after %d steps (first [%zu]: %.9g vs "
           "%.9g)",
           mesh.c_str(), what, name.c_str(), diff, va.size(), kSteps, first,
           static_cast<double>(va[first]), static_cast<double>(vb[first]));
  }
  if (globalFailures() == 0 && gFailures == before)
    info("[%s] %s: bit-identical losses and params over %d steps", mesh.c_str(), what, kSteps);
}

void compareWithReference(const Trajectory &dist, const Trajectory &ref, const std::string &mesh) {
  for (const auto &[name, v] : ref.initial)
    if (dist.initial.at(name) != v)
      fail("[%s] %s: reassembled right after binding, differs from its initial values",
           mesh.c_str(), name.c_str());
  // Each element of the averaged gradient counted once over owners,
  // replicas and model-parallel shards and copies.
  double worstNorm = 0;
  for (size_t i = 0; i < ref.norms.size(); ++i)
    worstNorm = std::max(worstNorm, std::fabs(dist.norms[i] - ref.norms[i]) / ref.norms[i]);
  if (worstNorm > 1e-6)
    fail("[%s] global gradient norm: worst relative error %.3g vs the single-process norm",
         mesh.c_str(), worstNorm);
  else
    info("[%s] global gradient norm of every step within %.3g of the single-process norm "
         "(step 0: %.9g)",
         mesh.c_str(), worstNorm, dist.norms[0]);
  const double l0 = dist.losses[0], r0 = ref.losses[0];
  const double lossErr = std::fabs(l0 - r0) / std::max(1e-30, std::fabs(r0));
  if (lossErr > 1e-6)
    fail("[%s] loss at step 0: distributed %.9g, reference %.9g (relative error %.3g)",
         mesh.c_str(), l0, r0, lossErr);
  double worst = 0;
  std::string worstName;
  for (const auto &[name, r] : ref.final) {
    const std::vector<float> &d = dist.final.at(name);
    double maxDiff = 0, maxAbs = 0, moved = 0;
    const std::vector<float> &init = ref.initial.at(name);
    for (size_t i = 0; i < r.size(); ++i) {
      maxDiff = std::max(maxDiff, std::fabs(static_cast<double>(d[i]) - r[i]));
      maxAbs = std::max(maxAbs, std::fabs(static_cast<double>(r[i])));
      moved = std::max(moved, std::fabs(static_cast<double>(r[i]) - init[i]));
    }
    const double rel = maxDiff / std::max(maxAbs, 1e-30);
    if (rel > worst) {
      worst = rel;
      worstName = name;
    }
    if (rel > kRelTol)
      fail("[%s] %s after %d steps: relative error %.3g vs the single-process reference "
           "(max abs diff %.3g, max abs value %.3g; tolerance %g)",
           mesh.c_str(), name.c_str(), kSteps, rel, maxDiff, maxAbs, kRelTol);
    if (moved == 0)
      fail("[%s] %s: the reference never moved it (the test would prove nothing)", mesh.c_str(),
           name.c_str());
  }
  // The worst over all ranks (each reassembled on its own).
  struct {
    double v;
    int rank;
  } in{worst, gRank}, out{0, 0};
  MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
  info("[%s] vs single-process reference: loss step 0 %.6f (ref %.6f), step %d %.6f (ref %.6f); "
       "worst param relative error %.3g (rank %d; rank 0's worst: %s)",
       mesh.c_str(), l0, r0, kSteps - 1, static_cast<double>(dist.losses.back()),
       static_cast<double>(ref.losses.back()), out.v, out.rank, worstName.c_str());
}

int usage() {
  if (gRank == 0)
    std::fprintf(stderr, "usage: dmuon-mp-test --plan PLAN --layout tp|ep|ep-strided|cp|vocab "
                         "[--different-data-expect-mismatch]\n");
  return 2;
}

int runTests(int argc, char **argv) {
  std::string planPath, layout;
  // Different rows along a dim the plan treats as pure model-parallel: the
  // averaged gradient misses the other coordinates' tokens (the run must
  // then differ from the union reference).
  bool expectMismatch = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--plan" && i + 1 < argc)
      planPath = argv[++i];
    else if (a == "--layout" && i + 1 < argc)
      layout = argv[++i];
    else if (a == "--different-data-expect-mismatch")
      expectMismatch = true;
    else
      return usage();
  }
  if (planPath.empty() ||
      (layout != "tp" && layout != "ep" && layout != "ep-strided" && layout != "cp" &&
       layout != "vocab"))
    return usage();
  dmuon::Plan plan(planPath);
  if (plan.worldSize() != gWorld) {
    if (gRank == 0)
      std::fprintf(stderr, "dmuon-mp-test: the plan is for %d ranks, running on %d\n",
                   plan.worldSize(), gWorld);
    return 2;
  }
  const Config cfg = configFor(layout);
  const std::vector<Spec> specs = modelSpecs(cfg, layout);
  const Topology topo = makeTopology(plan);
  if ((layout == "tp" || layout == "vocab") && topo.mpName != "tp")
    throw std::runtime_error("layout tp on a mesh without a tp dim");
  if (cfg.globalBatch % (topo.G * topo.R) != 0)
    throw std::runtime_error("the global batch does not split over the data-parallel ranks");

  Distributed dist(plan, cfg, specs, topo, topo.mpCarriesData || expectMismatch);
  dist.checkPlan();
  dist.checkLocalSizes();
  const Trajectory ref = runReference(plan, cfg, specs, kSteps);
  if (expectMismatch) {
    if (topo.mpCarriesData)
      throw std::runtime_error("--different-data-expect-mismatch wants a plan whose '" +
                               topo.mpName + "' is pure model-parallel (':model')");
    const Trajectory a = dist.run({"z3/async", DMUON_MODE_Z3, 1, false});
    double worst = 0;
    for (const auto &[name, r] : ref.final) {
      double diff = 0, scale = 0;
      for (size_t i = 0; i < r.size(); ++i) {
        diff = std::max(diff, std::fabs(static_cast<double>(a.final.at(name)[i]) - r[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(r[i])));
      }
      worst = std::max(worst, diff / std::max(scale, 1e-30));
    }
    if (worst < 1e-3)
      fail("[%s] different rows per '%s' coordinate with '%s' pure model-parallel: params "
           "within %.3g of the union reference; expected them to miss the other "
           "coordinates' tokens",
           topo.text.c_str(), topo.mpName.c_str(), topo.mpName.c_str(), worst);
    else
      info("[%s] '%s' as pure model-parallel with different rows per coordinate: worst param "
           "relative error %.3g vs the union reference (the data-carrying default gives "
           "agreement within 1e-4)",
           topo.text.c_str(), topo.mpName.c_str(), worst);
    MPI_Comm comm = topo.mpComm;
    MPI_Comm_free(&comm);
    return 0;
  }

  const RunSpec z3async{"z3/async", DMUON_MODE_Z3, 1, true};
  const RunSpec z2sync{"z2/sync", DMUON_MODE_Z2, 0, true};
  const RunSpec overlap{"z3/async, no synchronize between steps", DMUON_MODE_Z3, 1, false};

  const Trajectory a = dist.run(z3async);
  info("[%s] %s: %d steps, I1-I4 and byte counts checked after every step (%d failures so far)",
       topo.text.c_str(), z3async.label, kSteps, globalFailures());
  compareWithReference(a, ref, topo.text);
  for (const RunSpec *spec : {&z2sync, &overlap}) {
    const Trajectory b = dist.run(*spec);
    const std::string what = std::string(spec->label) + " vs " + z3async.label;
    expectIdentical(what.c_str(), b, a, topo.text);
  }
  MPI_Comm comm = topo.mpComm;
  MPI_Comm_free(&comm);
  return 0;
}

} // namespace

int main(int argc, char **argv) { return mpicheck::runMain(argc, argv, runTests); }
