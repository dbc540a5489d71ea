#include "sim/Simulate.h"
#include "common/RankRows.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>

namespace dmuon::sim {

namespace {

// The latest arrival per coupling collective over `ranks`.
void maxInto(Arrivals &into, const Arrivals &a) {
  auto merge = [](std::vector<std::vector<double>> &dst,
                  const std::vector<std::vector<double>> &src) {
    if (dst.size() < src.size())
      dst.resize(src.size());
    for (size_t s = 0; s < src.size(); ++s) {
      if (dst[s].size() < src[s].size())
        dst[s].resize(src[s].size(), 0);
      for (size_t i = 0; i < src[s].size(); ++i)
        dst[s][i] = std::max(dst[s][i], src[s][i]);
    }
  };
  merge(into.global, a.global);
  merge(into.replicate, a.replicate);
}

// The first figure of `t` that is not finite ("total = inf"), or "". The
// description's ranges keep every figure finite; this is the check that a
// result printed is a number, whatever the figures were.
std::string nonFinite(const StepTimes &t) {
  const std::pair<const char *, double> figures[] = {{"total", t.total},
                                                     {"compute", t.compute},
                                                     {"exposed", t.exposed},
                                                     {"optimizer", t.optimizer},
                                                     {"ns", t.ns}};
  for (const auto &[name, value] : figures)
    if (!std::isfinite(value))
      return std::string(name) + " = " + (std::isnan(value) ? "nan" : "inf");
  return "";
}

std::string overflowed(const std::string &what, const std::string &figure) {
  return "the simulated " + what + " is not finite (" + figure +
         "): the cluster's figures overflow the cost model";
}

// Runs every rank's program twice (simulate() says why) and sets `out` to
// the busiest rank's result; `bounds` gets that rank's bounds.
bool runRanks(const Cluster &c, const MeshView &mesh, const std::vector<Program> &programs,
              const std::string &what, SchemeResult &out, Bounds &bounds, std::string &error) {
  // Pass 1: each rank alone. The replicate bound of a rank is what the
  // ranks of its shard column reached (the owners among them send), the
  // global bound what every rank reached.
  const int64_t G = mesh.shardDim >= 0 ? mesh.dims[static_cast<size_t>(mesh.shardDim)] : 1;
  std::vector<Arrivals> byColumn(static_cast<size_t>(G));
  Arrivals global;
  auto shardOf = [&](int64_t r) {
    return mesh.shardDim >= 0 ? mesh.coord(r)[static_cast<size_t>(mesh.shardDim)] : 0;
  };
  for (int64_t r = 0; r < mesh.world; ++r) {
    RankRun run = runProgram(c, programs[static_cast<size_t>(r)], nullptr, false);
    maxInto(byColumn[static_cast<size_t>(shardOf(r))], run.arrivals);
    maxInto(global, run.arrivals);
  }
  // Pass 2, with the bounds; the busiest rank is the one with the longest
  // step (the lowest such rank on ties).
  double worst = -1;
  for (int64_t r = 0; r < mesh.world; ++r) {
    Bounds b;
    b.replicate = byColumn[static_cast<size_t>(shardOf(r))].replicate;
    b.global = global.global;
    RankRun run = runProgram(c, programs[static_cast<size_t>(r)], &b, false);
    if (const std::string bad = nonFinite(run.times); !bad.empty()) {
      error = overflowed(what + " of rank " + std::to_string(r), bad);
      return false;
    }
    if (run.times.total > worst) {
      worst = run.times.total;
      out = {"dmuon", r, run.times};
    }
  }
  bounds.replicate = byColumn[static_cast<size_t>(shardOf(out.rank))].replicate;
  bounds.global = global.global;
  return true;
}

} // namespace

bool simulate(const plan::Plan &p, const Cluster &c0, const std::string &clusterPath,
              Simulation &out, std::string &error) {
  if (common::RankRows(p).empty()) {
    error = "the plan has no per-rank figures (it stopped before the layout pass); simulate a "
            "complete plan";
    return false;
  }
  const MeshView mesh = MeshView::of(p, c0.devicesPerNode);
  if (mesh.world > kMaxSimulatedRanks) {
    error = "the plan's mesh has " + std::to_string(mesh.world) +
            " ranks; the simulator runs every rank's program and simulates at most " +
            std::to_string(kMaxSimulatedRanks);
    return false;
  }
  // Oversubscribed processors slow every rank's compute alike.
  out.computeShare = computeShare(c0, mesh.world);
  const Cluster c = withComputeShare(c0, out.computeShare);
  if (mesh.nodes() > 1 && !c.inter.present) {
    error = "the mesh's " + std::to_string(mesh.world) + " ranks span " +
            std::to_string(mesh.nodes()) + " nodes of " + std::to_string(c.devicesPerNode) +
            " devices, but the cluster describes no inter-node network ([network.inter])";
    return false;
  }
  out.clusterName = c.name;
  out.clusterPath = clusterPath;
  out.world = mesh.world;
  out.nodes = mesh.nodes();
  out.devicesPerNode = c.devicesPerNode;
  out.split = splitCompute(p, c);
  for (size_t g = 0; g < out.split.names.size(); ++g)
    for (const auto &[pass, seconds] :
         {std::pair<const char *, double>{"forward", out.split.forward[g]},
          {"backward", out.split.backward[g]}})
      if (!std::isfinite(seconds)) {
        error = overflowed(std::string(pass) + " of hook group '" + out.split.names[g] + "'",
                           std::isnan(seconds) ? "nan" : "inf");
        return false;
      }
  out.tokensPerRank = c.workload.tokensPerRank;
  out.mfu = c.workload.mfu;
  const std::unique_ptr<PlanDigest> d = digestPlan(p, mesh);

  std::vector<Program> programs;
  programs.reserve(static_cast<size_t>(mesh.world));
  out.collectiveWait = oversubscribedWait(c0, mesh.world);
  for (int64_t r = 0; r < mesh.world; ++r) {
    programs.push_back(dmuonProgram(p, *d, mesh, c, out.split, r));
    programs.back().collectiveWait = out.collectiveWait;
  }

  Bounds bounds;
  if (!runRanks(c, mesh, programs, "dmuon step", out.dmuon, bounds, error))
    return false;
  out.timeline =
      runProgram(c, programs[static_cast<size_t>(out.dmuon.rank)], &bounds, true).timeline;
  // The worst step of the refresh period: the step whose refreshes make
  // some rank's optimizer compute longest (each rank's worst step, the
  // costliest of them), every rank at that step.
  out.refreshes = refreshPeriod(p);
  if (out.refreshes.any()) {
    double longest = -1;
    for (int64_t r = 0; r < mesh.world; ++r) {
      const std::vector<Refresh> refreshes = rankRefreshes(p, mesh, c, r);
      const auto [step, seconds] = worstRefreshStep(refreshes, out.refreshes);
      const double load = programs[static_cast<size_t>(r)].nsSeconds -
                          amortizedRefreshSeconds(refreshes, out.refreshes) + seconds;
      if (load > longest) {
        longest = load;
        out.worstStep = step;
      }
    }
    for (int64_t r = 0; r < mesh.world; ++r) {
      programs[static_cast<size_t>(r)] = dmuonProgram(p, *d, mesh, c, out.split, r, out.worstStep);
      programs[static_cast<size_t>(r)].collectiveWait = out.collectiveWait;
    }
    Bounds unused;
    if (!runRanks(c, mesh, programs, "dmuon worst step", out.dmuonWorst, unused, error))
      return false;
    out.dmuonWorst.name = "dmuon worst step";
  }
  for (Baseline base : {Baseline::AdamW, Baseline::NaiveAllReduce, Baseline::NaiveAllGather}) {
    Program prog = baselineProgram(base, p, *d, mesh, c, out.split);
    prog.collectiveWait = out.collectiveWait;
    out.baselines.push_back({baselineName(base), 0, runProgram(c, prog, nullptr, false).times});
    if (const std::string bad = nonFinite(out.baselines.back().times); !bad.empty()) {
      error = overflowed(out.baselines.back().name + " step", bad);
      return false;
    }
  }
  out.memory = checkMemory(p, c.device.memoryBytes);
  return true;
}

} // namespace dmuon::sim
