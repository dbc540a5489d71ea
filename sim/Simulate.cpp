#include "sim/Simulate.h"
#include "common/MeshIndex.h"
#include "common/RankRows.h"
#include "sim/CostModel.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
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

// Runs every rank's program twice (simulate() says why) and sets
// `perStage[k]` to the busiest rank of pipeline stage k (the one stage of a
// plan without stages), `bounds[k]` to that rank's bounds. The stages are
// coupled by the schedule (pipelinedStep), not here: a rank meets only its
// own stage's ranks.
bool runRanks(const Cluster &c, const MeshView &mesh, const std::vector<Program> &programs,
              const std::string &what, std::vector<SchemeResult> &perStage,
              std::vector<Bounds> &bounds, std::string &error) {
  // Pass 1: each rank alone. The replicate bound of a rank is what the
  // ranks of its shard column reached (the owners among them send), the
  // global bound what every rank of its stage reached.
  const int64_t G = mesh.shardDim >= 0 ? mesh.dims[static_cast<size_t>(mesh.shardDim)] : 1;
  const int64_t P = std::max<int64_t>(1, mesh.P);
  std::vector<Arrivals> byColumn(static_cast<size_t>(G * P));
  std::vector<Arrivals> global(static_cast<size_t>(P));
  auto columnOf = [&](int64_t r) {
    const int64_t s = mesh.shardDim >= 0 ? mesh.coord(r)[static_cast<size_t>(mesh.shardDim)] : 0;
    return static_cast<size_t>(mesh.stageOfRank(r) * G + s);
  };
  auto stageOf = [&](int64_t r) { return static_cast<size_t>(mesh.stageOfRank(r)); };
  for (int64_t r = 0; r < mesh.world; ++r) {
    RankRun run = runProgram(c, programs[static_cast<size_t>(r)], nullptr, false);
    maxInto(byColumn[columnOf(r)], run.arrivals);
    maxInto(global[stageOf(r)], run.arrivals);
  }
  // Pass 2, with the bounds; the busiest rank is the one with the longest
  // step (the lowest such rank on ties).
  std::vector<double> worst(static_cast<size_t>(P), -1);
  perStage.assign(static_cast<size_t>(P), {});
  bounds.assign(static_cast<size_t>(P), {});
  for (int64_t r = 0; r < mesh.world; ++r) {
    Bounds b;
    b.replicate = byColumn[columnOf(r)].replicate;
    b.global = global[stageOf(r)].global;
    RankRun run = runProgram(c, programs[static_cast<size_t>(r)], &b, false);
    if (const std::string bad = nonFinite(run.times); !bad.empty()) {
      error = overflowed(what + " of rank " + std::to_string(r), bad);
      return false;
    }
    const size_t k = stageOf(r);
    if (run.times.total > worst[k]) {
      worst[k] = run.times.total;
      perStage[k] = {"dmuon", r, run.times};
      bounds[k] = std::move(b);
    }
  }
  return true;
}

// The busiest of `perStage` (a plan without stages has one).
size_t busiest(const std::vector<SchemeResult> &perStage) {
  size_t k = 0;
  for (size_t i = 1; i < perStage.size(); ++i)
    if (perStage[i].times.total > perStage[k].times.total)
      k = i;
  return k;
}

double dtypeBytes(MatmulDType d) {
  switch (d) {
  case MatmulDType::f32:
    return 4;
  case MatmulDType::f64:
    return 8;
  case MatmulDType::bf16:
  case MatmulDType::f16:
    return 2;
  }
  return 2;
}

// Seconds to send `bytes` from each rank of stage k to its peer on stage
// k + 1 (the same coordinates but the stage's), [k] for every boundary:
// one point-to-point send, priced as a broadcast of two ranks (one latency
// step, every byte once), on the inter-node network when any pair of the
// boundary is on two nodes.
std::vector<double> boundarySends(const Cluster &c, const MeshView &mesh, double bytes) {
  const int64_t P = mesh.P;
  std::vector<double> out(static_cast<size_t>(P), 0);
  if (bytes <= 0 || mesh.stageDim < 0)
    return out;
  std::vector<bool> inter(static_cast<size_t>(P), false);
  for (int64_t r = 0; r < mesh.world; ++r) {
    std::vector<int64_t> coord = mesh.coord(r);
    int64_t &k = coord[static_cast<size_t>(mesh.stageDim)];
    if (k + 1 >= P)
      continue;
    const size_t boundary = static_cast<size_t>(k);
    ++k;
    if (common::rowMajorRank(mesh.dims, coord) / mesh.devicesPerNode != r / mesh.devicesPerNode)
      inter[boundary] = true;
  }
  for (int64_t k = 0; k + 1 < P; ++k)
    out[static_cast<size_t>(k)] =
        transferSeconds(c, {CollKind::Broadcast, 2, bytes, inter[static_cast<size_t>(k)], 1});
  return out;
}

} // namespace

int64_t inferHiddenSize(const plan::Plan &p) {
  std::map<int64_t, int64_t> count; // length -> 1-D params
  if (p.params())
    for (const plan::Param *q : *p.params())
      if (q->shape() && q->shape()->size() == 1)
        ++count[q->shape()->Get(0)];
  int64_t best = 0, most = 0;
  for (const auto &[length, n] : count) // ascending: a later tie is longer
    if (n >= most) {
      best = length;
      most = n;
    }
  return best;
}

SchemeResult pipelinedStep(const std::vector<SchemeResult> &perStage,
                           const std::vector<StageCost> &costs, PipelineSchedule schedule,
                           int64_t microBatches, PipelineReport *report) {
  const ScheduleRun run = runSchedule(schedule, microBatches, costs);
  double flush = 0, optimizer = 0;
  size_t slowest = 0;
  double slowestEnd = -1;
  for (size_t k = 0; k < perStage.size(); ++k) {
    const StepTimes &t = perStage[k].times;
    flush = std::max(flush, run.end[k] + t.exposed);
    optimizer = std::max(optimizer, t.optimizer);
    if (run.end[k] + t.exposed + t.optimizer > slowestEnd) {
      slowestEnd = run.end[k] + t.exposed + t.optimizer;
      slowest = k;
    }
  }
  SchemeResult out = perStage[slowest];
  out.times.total = flush + optimizer;
  if (report) {
    report->makespan = run.makespan;
    report->bubble = run.bubble;
    report->flush = flush;
    report->rows.assign(perStage.size(), {});
    for (size_t k = 0; k < perStage.size(); ++k) {
      StageRow &row = report->rows[k];
      row.rank = perStage[k].rank;
      row.cost = costs[k];
      row.times = perStage[k].times;
      row.end = run.end[k];
      row.inFlight = run.inFlight[k];
    }
  }
  return out;
}

namespace {

// The run's description in `out`, and the hook groups' compute split (which
// must be finite).
bool describeRun(const plan::Plan &p, const Cluster &c, const MeshView &mesh,
                 const std::string &clusterPath, Simulation &out, std::string &error) {
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
  return true;
}

// Each rank's programs. A plan with stages: each rank's program holds its
// stage's layers only, from its stage's digest.
class RankPrograms {
public:
  RankPrograms(const plan::Plan &p, const MeshView &mesh, const Cluster &c,
               const ComputeSplit &split, double collectiveWait)
      : p_(p), mesh_(mesh), c_(c), split_(split), collectiveWait_(collectiveWait),
        stages_(std::max<int64_t>(1, mesh.P)), whole_(digestPlan(p, mesh)) {
    if (stages_ > 1)
      for (int64_t k = 0; k < stages_; ++k)
        stageDigests_.push_back(digestPlan(p, mesh, k));
  }

  int64_t stages() const { return stages_; }

  // Rank r's dmuon step, with the refreshes of `refreshStep` (none: each
  // refresh amortized over its period).
  Program dmuon(int64_t r, std::optional<int64_t> refreshStep) const {
    Program prog = makeDmuon(r, refreshStep);
    prog.collectiveWait = collectiveWait_;
    return prog;
  }

  // A baseline's step on pipeline stage k (rank 0's coordinates there).
  Program baseline(Baseline base, int64_t k) const {
    Program prog = baselineProgram(base, p_, digest(k), mesh_, c_, split_);
    if (stages_ > 1)
      restrictToStage(prog, p_, k, stages_);
    prog.collectiveWait = collectiveWait_;
    return prog;
  }

private:
  const PlanDigest &digest(int64_t k) const {
    return stages_ > 1 ? *stageDigests_[static_cast<size_t>(k)] : *whole_;
  }

  Program makeDmuon(int64_t r, std::optional<int64_t> refreshStep) const {
    if (stages_ == 1)
      return dmuonProgram(p_, *whole_, mesh_, c_, split_, r, refreshStep);
    const int64_t k = mesh_.stageOfRank(r);
    Program prog = dmuonProgram(p_, digest(k), mesh_, c_, split_, r, refreshStep);
    restrictToStage(prog, p_, k, stages_);
    return prog;
  }

  const plan::Plan &p_;
  const MeshView &mesh_;
  const Cluster &c_;
  const ComputeSplit &split_;
  const double collectiveWait_;
  const int64_t stages_;
  const std::unique_ptr<PlanDigest> whole_;
  std::vector<std::unique_ptr<PlanDigest>> stageDigests_;
};

// The pipeline's settings in `pr`, and what a micro-batch costs each stage:
// its compute (the same on every rank of a stage, the layers' share of the
// workload) and its activations' send.
std::vector<StageCost> stageCosts(const plan::Plan &p, const Cluster &c, const MeshView &mesh,
                                  const std::vector<Program> &programs,
                                  const std::vector<SchemeResult> &perStage, PipelineReport &pr) {
  const int64_t P = mesh.P;
  pr.stages = P;
  pr.schedule = c.pipeline.schedule;
  pr.microBatches =
      c.pipeline.microBatches > 0 ? c.pipeline.microBatches : std::min(4 * P, kMaxMicroBatches);
  pr.hiddenSize = c.pipeline.hiddenSize > 0 ? c.pipeline.hiddenSize : inferHiddenSize(p);
  if (c.workload.kind == Workload::Kind::Flops)
    pr.tokensPerMicroBatch =
        c.workload.tokensPerRank * static_cast<double>(P) / static_cast<double>(pr.microBatches);
  pr.activationBytes = static_cast<double>(pr.hiddenSize) * pr.tokensPerMicroBatch *
                       dtypeBytes(c.workload.computeDType);
  const std::vector<double> sends = boundarySends(c, mesh, pr.activationBytes);
  std::vector<StageCost> costs(static_cast<size_t>(P));
  for (size_t k = 0; k < costs.size(); ++k) {
    for (const GroupWork &g : programs[static_cast<size_t>(perStage[k].rank)].groups) {
      costs[k].forward += g.forward;
      costs[k].backward += g.backward;
    }
    costs[k].forward /= static_cast<double>(pr.microBatches);
    costs[k].backward /= static_cast<double>(pr.microBatches);
    costs[k].send = sends[k];
  }
  return costs;
}

// The step of the refresh period whose refreshes make some rank's optimizer
// compute longest (each rank's worst step, the costliest of them); none if
// no rank's load is above -1.
std::optional<int64_t> worstRefreshStepOf(const plan::Plan &p, const Cluster &c,
                                          const MeshView &mesh,
                                          const std::vector<Program> &programs,
                                          const RefreshPeriod &period) {
  std::optional<int64_t> worst;
  double longest = -1;
  for (int64_t r = 0; r < mesh.world; ++r) {
    const std::vector<Refresh> refreshes = rankRefreshes(p, mesh, c, r);
    const auto [step, seconds] = worstRefreshStep(refreshes, period);
    const double load = programs[static_cast<size_t>(r)].nsSeconds -
                        amortizedRefreshSeconds(refreshes, period) + seconds;
    if (load > longest) {
      longest = load;
      worst = step;
    }
  }
  return worst;
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
  if (!describeRun(p, c, mesh, clusterPath, out, error))
    return false;
  out.collectiveWait = oversubscribedWait(c0, mesh.world);
  const RankPrograms make(p, mesh, c, out.split, out.collectiveWait);
  const int64_t P = make.stages();
  std::vector<Program> programs;
  programs.reserve(static_cast<size_t>(mesh.world));
  for (int64_t r = 0; r < mesh.world; ++r)
    programs.push_back(make.dmuon(r, std::nullopt));

  std::vector<SchemeResult> perStage;
  std::vector<Bounds> bounds;
  if (!runRanks(c, mesh, programs, "dmuon step", perStage, bounds, error))
    return false;
  std::vector<StageCost> costs;
  PipelineReport &pr = out.pipeline;
  if (P > 1) {
    costs = stageCosts(p, c, mesh, programs, perStage, pr);
    out.dmuon = pipelinedStep(perStage, costs, pr.schedule, pr.microBatches, &pr);
    for (int64_t r = 0; r < mesh.world; ++r)
      ++pr.rows[static_cast<size_t>(mesh.stageOfRank(r))].ranks;
    if (const std::string bad = nonFinite(out.dmuon.times); !bad.empty()) {
      error = overflowed("pipelined dmuon step", bad);
      return false;
    }
  } else {
    out.dmuon = perStage[0];
  }
  const size_t shown = P > 1 ? static_cast<size_t>(mesh.stageOfRank(out.dmuon.rank)) : 0;
  out.timeline =
      runProgram(c, programs[static_cast<size_t>(out.dmuon.rank)], &bounds[shown], true).timeline;
  // The worst step of the refresh period, every rank at that step.
  out.refreshes = refreshPeriod(p);
  if (out.refreshes.any()) {
    if (const std::optional<int64_t> step = worstRefreshStepOf(p, c, mesh, programs, out.refreshes))
      out.worstStep = *step;
    for (int64_t r = 0; r < mesh.world; ++r)
      programs[static_cast<size_t>(r)] = make.dmuon(r, out.worstStep);
    std::vector<Bounds> unused;
    if (!runRanks(c, mesh, programs, "dmuon worst step", perStage, unused, error))
      return false;
    out.dmuonWorst = P > 1 ? pipelinedStep(perStage, costs, pr.schedule, pr.microBatches, nullptr)
                           : perStage[busiest(perStage)];
    out.dmuonWorst.name = "dmuon worst step";
  }
  // The baselines on a pipeline run the same schedule, each stage the
  // baseline over its own layers (rank 0's coordinates on that stage).
  for (Baseline base : {Baseline::AdamW, Baseline::NaiveAllReduce, Baseline::NaiveAllGather}) {
    std::vector<SchemeResult> stages;
    for (int64_t k = 0; k < P; ++k)
      stages.push_back(
          {baselineName(base), 0, runProgram(c, make.baseline(base, k), nullptr, false).times});
    out.baselines.push_back(
        P > 1 ? pipelinedStep(stages, costs, pr.schedule, pr.microBatches, nullptr) : stages[0]);
    out.baselines.back().name = baselineName(base);
    out.baselines.back().rank = 0;
    if (const std::string bad = nonFinite(out.baselines.back().times); !bad.empty()) {
      error = overflowed(out.baselines.back().name + " step", bad);
      return false;
    }
  }
  out.memory = checkMemory(p, c.device.memoryBytes);
  return true;
}

} // namespace dmuon::sim
