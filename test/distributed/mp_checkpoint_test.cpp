// Checkpoints of model-parallel-sharded params under mpirun: the model of
// mp_test.cpp (MpModel.h) is trained for kSave steps under --save-plan,
// saved, and resumed under each --resume-plan (same world size, another
// data-parallel mesh, or another model-parallel layout) for the remaining
// steps. Checks, per resume plan:
//   * right after the load, every param reassembled from the new runtime's
//     local shards is bit-identical to what the saving runtime held;
//   * the step the load returns is the one saved;
//   * the losses and the final params match a single-process run of all
//     kSteps within 1e-4 relative (max abs diff / max abs value), and,
//     resumed under the saving plan itself, are bit-identical to an
//     uninterrupted distributed run of that plan (masters, Muon momentum and
//     AdamW moments all came back exactly).
//
// The vocab layout (mp-vocab.toml) splits its head, bias and experts
// unevenly over tp (torch.chunk): its entries hold slices of different sizes,
// and a resume under tp = 1 reads each whole param from two of them. The
// ep-strided layout (mp-ep-strided.toml) holds its experts and AdamW head as
// StridedShard(0, 2) on ep, two runs of rows per rank, each saved as its own
// entry; `--resume-layout ep` before a resume plan resumes it as mp-ep.toml
// lays them out (Shard(0) experts, a whole head), from the strided entries.
//
// usage: mpirun -n N dmuon-mp-checkpoint-test --layout tp|ep|ep-strided|vocab --dir D
//          --save-plan P [--resume-layout L] --resume-plan Q [--resume-plan R ...]
#include "MpHost.h"
#include "MpiCheck.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int kSteps = 8, kSave = 4;
constexpr double kRelTol = 1e-4;

using mpicheck::fail;
using mpicheck::gFailures;
using mpicheck::gRank;
using mpicheck::globalFailures;
using mpicheck::info;
using namespace mpmodel;

// Losses of steps [from, kSteps) and the final params of one run.
struct Run {
  std::vector<float> losses;
  Tensors final;
};

dmuon::Runtime makeRuntime(const dmuon::Plan &plan) {
  MPI_Comm comm = MPI_COMM_WORLD;
  dmuon_runtime_options_t opt;
  dmuon_runtime_options_init(&opt); // hyper-parameters: the plan's
  opt.backend = DMUON_BACKEND_MPI;
  opt.communicator = &comm;
  return dmuon::Runtime(plan, opt);
}

void train(MpHost &host, dmuon::Runtime &rt, int from, int to, Run &out) {
  for (int step = from; step < to; ++step)
    out.losses.push_back(host.trainStep(rt, step));
  rt.synchronize();
}

void freeComm(const Topology &topo) {
  MPI_Comm comm = topo.mpComm;
  MPI_Comm_free(&comm);
}

// The largest |a - b| over the largest |b|, over every param.
double worstRelative(const Tensors &a, const Tensors &b, std::string &where) {
  double worst = 0;
  for (const auto &[name, want] : b) {
    const std::vector<float> &got = a.at(name);
    double diff = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    }
    const double rel = diff / std::max(scale, 1e-30);
    if (rel >= worst) {
      worst = rel;
      where = name;
    }
  }
  return worst;
}

bool identical(const Tensors &a, const Tensors &b, std::string &where) {
  for (const auto &[name, v] : b)
    if (a.at(name).size() != v.size() ||
        std::memcmp(a.at(name).data(), v.data(), v.size() * sizeof(float)) != 0) {
      where = name;
      return false;
    }
  return true;
}

int usage() {
  if (gRank == 0)
    std::fprintf(stderr, "usage: dmuon-mp-checkpoint-test --layout tp|ep|ep-strided|vocab "
                         "--dir D --save-plan P [--resume-layout L] --resume-plan Q "
                         "[--resume-plan R ...]\n");
  return 2;
}

int runTests(int argc, char **argv) {
  std::string layout, dir, savePath, resumeLayout;
  std::vector<std::pair<std::string, std::string>> resumes; // plan, layout ("": --layout)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc)
      return usage();
    if (a == "--layout")
      layout = argv[++i];
    else if (a == "--dir")
      dir = argv[++i];
    else if (a == "--save-plan")
      savePath = argv[++i];
    else if (a == "--resume-layout")
      resumeLayout = argv[++i];
    else if (a == "--resume-plan") {
      resumes.emplace_back(argv[++i], resumeLayout);
      resumeLayout.clear(); // the next plan's alone
    }
    else
      return usage();
  }
  auto known = [](const std::string &l) {
    return l == "tp" || l == "ep" || l == "ep-strided" || l == "vocab";
  };
  for (auto &[path, l] : resumes) {
    if (l.empty())
      l = layout;
    if (!known(l))
      return usage();
  }
  if (!known(layout) || dir.empty() || savePath.empty() || resumes.empty())
    return usage();
  const Config cfg = configFor(layout);
  const std::vector<Spec> specs = modelSpecs(cfg, layout);
  if (gRank == 0)
    std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);

  // The saving run, and the uninterrupted run of the same plan.
  const dmuon::Plan savePlan(savePath);
  const Topology saveTopo = makeTopology(savePlan);
  const Trajectory ref = runReference(savePlan, cfg, specs, kSteps);
  Tensors saved;
  Run uninterrupted;
  {
    MpHost host(savePlan, cfg, specs, saveTopo, saveTopo.mpCarriesData);
    dmuon::Runtime rt = makeRuntime(savePlan);
    host.bindInitial(rt);
    Run first;
    train(host, rt, 0, kSave, first);
    rt.saveCheckpoint(dir, kSave);
    saved = host.reassembleAll(rt);
    train(host, rt, kSave, kSteps, uninterrupted);
    uninterrupted.final = host.reassembleAll(rt);
  }
  info("[%s] trained %d steps, saved to %s, trained on to step %d", saveTopo.text.c_str(), kSave,
       dir.c_str(), kSteps);

  for (const auto &[path, resumeAs] : resumes) {
    const dmuon::Plan plan(path);
    const Topology topo = makeTopology(plan);
    const std::string what = saveTopo.text + " -> " + topo.text +
                             (resumeAs != layout ? " (" + layout + " -> " + resumeAs + ")" : "");
    const int before = gFailures;
    MpHost host(plan, cfg, modelSpecs(cfg, resumeAs), topo, topo.mpCarriesData);
    dmuon::Runtime rt = makeRuntime(plan);
    const int64_t step = rt.loadCheckpoint(dir); // binds every param
    if (step != kSave)
      fail("[%s] the load returned step %lld, the save was of step %d", what.c_str(),
           static_cast<long long>(step), kSave);
    std::string where;
    if (!identical(host.reassembleAll(rt), saved, where))
      fail("[%s] right after the load, %s differs from the saved values", what.c_str(),
           where.c_str());
    Run resumed;
    train(host, rt, kSave, kSteps, resumed);
    resumed.final = host.reassembleAll(rt);

    double worstLoss = 0;
    for (int s = kSave; s < kSteps; ++s) {
      const double got = resumed.losses[static_cast<size_t>(s - kSave)];
      const double want = ref.losses[static_cast<size_t>(s)];
      worstLoss = std::max(worstLoss, std::fabs(got - want) / std::fabs(want));
    }
    const double worst = worstRelative(resumed.final, ref.final, where);
    if (worstLoss > kRelTol)
      fail("[%s] losses after the resume: relative error %.3g vs the single-process run",
           what.c_str(), worstLoss);
    if (worst > kRelTol)
      fail("[%s] %s after %d steps: relative error %.3g vs the single-process run (tolerance %g)",
           what.c_str(), where.c_str(), kSteps, worst, kRelTol);
    // Under the saving plan nothing may differ from not stopping at all.
    const bool samePlan = plan.fingerprint() == savePlan.fingerprint();
    if (samePlan && (resumed.losses != uninterrupted.losses ||
                     !identical(resumed.final, uninterrupted.final, where)))
      fail("[%s] resumed under the saving plan, %s is not bit-identical to the uninterrupted "
           "run",
           what.c_str(), where.c_str());
    if (globalFailures() == 0 && gFailures == before)
      info("[%s] resumed at step %d: values restored bit for bit; after step %d worst param "
           "relative error %.3g (%s), worst loss %.3g vs the single-process run%s",
           what.c_str(), kSave, kSteps, worst, where.c_str(), worstLoss,
           samePlan ? "; bit-identical to the uninterrupted run" : "");
    freeComm(topo);
  }
  freeComm(saveTopo);
  return 0;
}

} // namespace

int main(int argc, char **argv) { return mpicheck::runMain(argc, argv, runTests); }
