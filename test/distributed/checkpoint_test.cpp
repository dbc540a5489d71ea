// Checkpoint scenarios of the tiny model under mpirun, one mode per call;
// checkpoint.sh strings them together (train, save, crash, resume elsewhere).
//   reference: train --steps, write losses and gathered params to --out
//   save:      train --steps from scratch, save to --ckpt at the end
//   resume:    load --ckpt, train on to --steps, compare with --compare
//              (bit-identical with --exact, else within --tol relative)
//   load-error: loading --ckpt must fail with a message containing --expect
#include "TinyModel.h"
#include "TinyRuntime.h"
#include "dmuon/dmuon.hpp"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

struct Flags {
  std::string mode, plan, ckpt, out, compare, expect;
  int steps = 10;
  bool exact = false;
  double tol = 1e-4;
};

Flags parse(int argc, char **argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--mode") f.mode = next();
    else if (a == "--plan") f.plan = next();
    else if (a == "--ckpt") f.ckpt = next();
    else if (a == "--out") f.out = next();
    else if (a == "--compare") f.compare = next();
    else if (a == "--expect") f.expect = next();
    else if (a == "--steps") f.steps = std::stoi(next());
    else if (a == "--tol") f.tol = std::stod(next());
    else if (a == "--exact") f.exact = true;
    else throw std::runtime_error("unknown flag " + a);
  }
  return f;
}

// Losses per step and every param's final values, as the reference run wrote.
struct Trajectory {
  std::map<int, double> loss;
  std::map<std::string, std::vector<float>> params;
};

void writeTrajectory(const std::string &path, const Trajectory &t) {
  std::ofstream out(path, std::ios::binary);
  for (auto &[step, loss] : t.loss)
    out << "loss " << step << " " << std::hexfloat << loss << "\n";
  for (auto &[name, v] : t.params) {
    out << "param " << name << " " << v.size();
    for (float x : v)
      out << " " << std::hexfloat << x;
    out << "\n";
  }
}

Trajectory readTrajectory(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot read " + path);
  Trajectory t;
  std::string kind;
  while (in >> kind) {
    if (kind == "loss") {
      int step;
      std::string v;
      in >> step >> v;
      t.loss[step] = std::strtod(v.c_str(), nullptr);
    } else {
      std::string name;
      size_t n;
      in >> name >> n;
      std::vector<float> v(n);
      for (size_t k = 0; k < n; ++k) {
        std::string x;
        in >> x;
        v[k] = std::strtof(x.c_str(), nullptr);
      }
      t.params[name] = std::move(v);
    }
  }
  return t;
}

int run(const Flags &f) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  tiny::Config cfg;
  dmuon::Plan plan(f.plan);
  MPI_Comm comm = MPI_COMM_WORLD;
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.backend = DMUON_BACKEND_MPI;
  o.communicator = &comm;
  dmuon::Runtime rt(plan, o);

  if (f.mode == "load-error") {
    int64_t step = 0;
    dmuon_status_t st = dmuon_checkpoint_load(rt.get(), f.ckpt.c_str(), &step);
    std::string msg = dmuon_runtime_last_error(rt.get());
    if (st == DMUON_SUCCESS || msg.find(f.expect) == std::string::npos) {
      std::fprintf(stderr, "rank %d: expected a load error containing '%s', got status %d: %s\n",
                   rank, f.expect.c_str(), static_cast<int>(st), msg.c_str());
      return 1;
    }
    if (rank == 0)
      std::printf("refused as expected: %s\n", msg.c_str());
    return 0;
  }

  tiny::PlanBinding binding(plan, cfg);
  tiny::RuntimeAccess access(rt, binding);
  int first = 0;
  if (f.mode == "resume") {
    first = static_cast<int>(rt.loadCheckpoint(f.ckpt));
    if (rank == 0)
      std::printf("resumed at step %d from %s\n", first, f.ckpt.c_str());
  } else {
    tiny::bindInitialParams(rt, cfg, /*seed=*/1);
  }

  const int64_t local = cfg.globalBatch / world;
  tiny::Data data(cfg, /*seed=*/1);
  tiny::Model model(cfg, local);
  std::vector<float> x(local * cfg.inDim), t(local * cfg.outDim);
  Trajectory traj;
  for (int step = first; step < f.steps; ++step) {
    data.batch(step, rank * local, local, x.data(), t.data());
    double mine = model.forwardBackward(access, x.data(), t.data()), sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    traj.loss[step] = sum / world;
    rt.step();
  }
  rt.synchronize();
  if (f.mode == "save") {
    rt.saveCheckpoint(f.ckpt, f.steps);
    if (rank == 0)
      std::printf("saved step %d to %s\n", f.steps, f.ckpt.c_str());
    return 0;
  }
  for (const tiny::ParamSpec &s : binding.specs()) {
    std::vector<float> v(s.numel);
    rt.gatherParam(s.name, v.data(), s.numel);
    traj.params[s.name] = std::move(v);
  }
  if (f.mode == "reference") {
    if (rank == 0)
      writeTrajectory(f.out, traj);
    return 0;
  }
  // resume: compare with the uninterrupted run.
  Trajectory ref = readTrajectory(f.compare);
  int failures = 0;
  for (auto &[step, loss] : traj.loss) {
    double want = ref.loss.at(step);
    bool ok = f.exact ? loss == want : std::fabs(loss - want) <= f.tol * std::fabs(want);
    if (!ok && rank == 0) {
      std::fprintf(stderr, "step %d: loss %.9g, uninterrupted run %.9g\n", step, loss, want);
      ++failures;
    }
  }
  double worst = 0;
  for (auto &[name, v] : traj.params) {
    const std::vector<float> &want = ref.params.at(name);
    double maxDiff = 0, maxAbs = 0;
    for (size_t k = 0; k < v.size(); ++k) {
      maxDiff = std::max(maxDiff, std::fabs(double(v[k]) - want[k]));
      maxAbs = std::max(maxAbs, std::fabs(double(want[k])));
    }
    double rel = maxAbs > 0 ? maxDiff / maxAbs : maxDiff;
    worst = std::max(worst, rel);
    bool ok = f.exact ? maxDiff == 0 : rel <= f.tol;
    if (!ok && rank == 0) {
      std::fprintf(stderr, "param %s: relative difference %.3g from the uninterrupted run\n",
                   name.c_str(), rel);
      ++failures;
    }
  }
  if (rank == 0)
    std::printf("resume %s: %zu params, worst relative difference %.3g\n",
                failures ? "FAILED" : "ok", traj.params.size(), worst);
  return failures ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rc;
  try {
    rc = run(parse(argc, argv));
  } catch (const std::exception &e) {
    std::fprintf(stderr, "checkpoint_test: %s\n", e.what());
    rc = 1;
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
