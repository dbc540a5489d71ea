#include "AutoSearch.h"

#include "AutoMesh.h"
#include "Pipeline.h"
#include "PlanWriter.h"
#include "plan/print/PrintCommon.h"
#include "sim/Simulate.h"

#include "llvm/Support/Timer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

namespace dmuon {

namespace {

// One planned and simulated candidate.
struct Candidate {
  MeshCandidate mesh;
  Mode mode = Mode::z3;
  int modeOrder = 0;        // its place in the modes tried: z3 before z2
  sim::StepTimes times;     // the busiest rank's (candidates that fit)
  double adamwTotal = 0;    // the AdamW baseline's step on the same mesh
  int64_t largestRank = -1; // the rank with the most memory
  int64_t largestBytes = 0;
  int64_t ranksOver = 0;
  bool fits() const { return ranksOver == 0; }
};

// The ranking: candidates that fit by the busiest rank's predicted step,
// then the refused ones (not simulated) by their largest rank's memory;
// ties to fewer replicas (less replicate traffic), Z3 before Z2 (less
// memory), then the mesh text, so the order is total and deterministic.
bool rankedBefore(const Candidate &a, const Candidate &b) {
  auto key = [](const Candidate &c) {
    return std::make_tuple(!c.fits(), c.fits() ? c.times.total : 0.0, c.largestBytes,
                           c.mesh.replicas, c.modeOrder, std::cref(c.mesh.text));
  };
  return key(a) < key(b);
}

const char *modeName(Mode m) { return m == Mode::z3 ? "z3" : "z2"; }

std::string fmt(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string padRight(std::string s, size_t width) {
  s.resize(std::max(s.size(), width), ' ');
  return s;
}
std::string padLeft(const std::string &s, size_t width) {
  return std::string(s.size() < width ? width - s.size() : 0, ' ') + s;
}

std::string bytesText(double b) { return planfile::print::humanBytes(b, 4); }

// A simulated time in ms; "-" for a refused candidate, which is not simulated.
std::string ms(const Candidate &c, double seconds) {
  return c.fits() ? fmt("%.3f", seconds * 1e3) : std::string("-");
}

void printTable(const std::vector<Candidate> &ranked, const std::string &spec,
                const sim::Cluster &cluster, double device, llvm::raw_ostream &os) {
  size_t meshWidth = 4;
  for (const Candidate &c : ranked)
    meshWidth = std::max(meshWidth, c.mesh.text.size());
  os << "dmuonc: --mesh " << spec << ": " << ranked.size() << " candidates on '"
     << (cluster.name.empty() ? std::string("(unnamed)") : cluster.name)
     << "', ranked by the busiest rank's predicted step; device memory "
     << bytesText(device) << "\n";
  os << padLeft("#", 4) << "  " << padRight("mesh", meshWidth)
     << "  mode     step_ms  compute_ms  exposed_ms  opt_step_ms  vs_adamw      memory  fits\n";
  int place = 0;
  for (const Candidate &c : ranked) {
    os << padLeft(c.fits() ? std::to_string(++place) : std::string("-"), 4) << "  "
       << padRight(c.mesh.text, meshWidth) << "  " << padRight(modeName(c.mode), 4)
       << padLeft(ms(c, c.times.total), 12) << padLeft(ms(c, c.times.compute), 12)
       << padLeft(ms(c, c.times.exposed), 12) << padLeft(ms(c, c.times.optimizer), 13)
       << padLeft(c.fits() && c.adamwTotal > 0
                      ? fmt("%+.2f%%", (c.times.total / c.adamwTotal - 1) * 100)
                      : std::string("-"),
                  10)
       << padLeft(bytesText(static_cast<double>(c.largestBytes)), 12) << "  "
       << (c.fits() ? std::string("yes")
                    : "no: refused, " + std::to_string(c.ranksOver) + " ranks over, rank " +
                          std::to_string(c.largestRank) + " by " +
                          bytesText(static_cast<double>(c.largestBytes) - device))
       << "\n";
  }
}

// Checks the candidate's plan against the device's memory and simulates
// it if it fits: a candidate that does not is refused before its
// simulation, the larger part of a candidate's cost.
bool score(const PlanBuffer &bytes, const sim::Cluster &cluster,
           const std::string &clusterPath, bool timing, Candidate &c, Diagnostics &diags) {
  const plan::Plan &p = *plan::GetPlan(bytes.data());
  const sim::MemoryReport memory = sim::checkMemory(p, cluster.device.memoryBytes);
  c.largestRank = memory.largest.rank;
  c.largestBytes = memory.largest.total;
  c.ranksOver = memory.ranksOver;
  if (!c.fits())
    return true;
  sim::Simulation s;
  std::string err;
  bool simulated;
  {
    llvm::NamedRegionTimer t("simulate", "Simulate the candidate", "dmuonc",
                             "dmuonc pass execution timing report", timing);
    simulated = sim::simulate(p, cluster, clusterPath, s, err);
  }
  if (!simulated) {
    diags.fileError(clusterPath, "cannot simulate --mesh " + c.mesh.text + ": " + err);
    return false;
  }
  c.times = s.dmuon.times;
  for (const sim::SchemeResult &b : s.baselines)
    if (b.name == "adamw")
      c.adamwTotal = b.times.total;
  return true;
}

} // namespace

bool searchAutoMesh(const DriverConfig &config, std::optional<PlanBuffer> &plan,
                    Diagnostics &diags) {
  const std::string &spec = config.pipeline.mesh;
  AutoMeshSpec autoSpec;
  if (!parseAutoMesh(spec, autoSpec, diags))
    return false;
  sim::Cluster cluster;
  if (!sim::loadCluster(config.cluster, diags, cluster))
    return false;
  if (!config.pipelineSchedule.empty())
    cluster.pipeline.schedule = config.pipelineSchedule == "gpipe"
                                    ? sim::PipelineSchedule::GPipe
                                    : sim::PipelineSchedule::OneFOneB;
  if (config.microBatches > 0)
    cluster.pipeline.microBatches = config.microBatches;
  const double device = cluster.device.memoryBytes;
  std::vector<Mode> modes = {Mode::z3, Mode::z2};
  if (config.modeGiven)
    modes = {config.options.mode};

  // The frontend resolves placements by mesh dim name, so the meshes with
  // and without dp_replicate each need one parse; the sizes do not matter.
  std::map<bool, PlanModel> frontends;
  const bool timing = config.pipeline.timePasses;
  std::vector<Candidate> scored;
  std::optional<Candidate> best;
  for (const MeshCandidate &mesh : autoMeshCandidates(autoSpec)) {
    PipelineOptions opts = config.pipeline;
    opts.mesh = mesh.text;
    const bool withReplicate = mesh.replicas > 1;
    auto it = frontends.find(withReplicate);
    if (it == frontends.end()) {
      PlanModel parsed;
      parsed.options = config.options;
      if (!runFrontend(opts, parsed, diags))
        return false;
      it = frontends.emplace(withReplicate, std::move(parsed)).first;
    }
    PlanModel laidOut = it->second;
    if (!parseMesh(mesh.text, laidOut.mesh, diags, opts.dataCarryingDims))
      return false;
    opts.stopAfter = Stage::layout;
    if (!runPasses(opts, laidOut, diags))
      return false;
    for (size_t k = 0; k < modes.size(); ++k) {
      PlanModel model = k + 1 < modes.size() ? laidOut : std::move(laidOut);
      model.options.mode = modes[k];
      opts.stopAfter = Stage::complete;
      if (!runPasses(opts, model, diags))
        return false;
      PlanBuffer bytes = [&] {
        llvm::NamedRegionTimer t("emit", "Write the plan", "dmuonc",
                                 "dmuonc pass execution timing report", timing);
        return writePlan(model);
      }();
      Candidate c;
      c.mesh = mesh;
      c.mode = modes[k];
      c.modeOrder = static_cast<int>(k);
      if (!score(bytes, cluster, config.cluster, timing, c, diags))
        return false;
      if (c.fits() && (!best || rankedBefore(c, *best))) {
        best = c;
        plan.emplace(std::move(bytes));
      }
      scored.push_back(std::move(c));
    }
  }
  std::sort(scored.begin(), scored.end(), rankedBefore);
  printTable(scored, spec, cluster, device, llvm::errs());
  if (!best) {
    const Candidate &least = scored.front(); // refused ones rank by memory
    diags.error("no candidate of --mesh " + spec + " fits the device's " + bytesText(device) +
                " ('" + config.cluster + "'); the smallest, --mesh " + least.mesh.text +
                " --mode=" + modeName(least.mode) + ", needs " +
                bytesText(static_cast<double>(least.largestBytes)) + " on rank " +
                std::to_string(least.largestRank) +
                "; model-parallel dims that shard the largest params (placements in the manifest, "
                "their sizes after N: 'auto:N,ep=16') or finer hook groups (--hook-boundary) "
                "would lower it");
    return false;
  }
  llvm::errs() << "dmuonc: chose --mesh " << best->mesh.text << " --mode=" << modeName(best->mode)
               << "\n";
  return true;
}

} // namespace dmuon
