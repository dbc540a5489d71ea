// dmuon-trainer: trains the tiny residual MLP (TinyModel.h) on synthetic
// regression data under MPI with libdmuon: Muon on the layers' matrices, each
// matrix owned by one rank, AdamW on the rest.
//
//   mpirun -n 4 build/bin/dmuon-trainer --plan build/examples/trainer/tiny-2x2.plan --steps 50
//
// Per step, every rank takes its own equal slice of the global batch and runs
// forward with pre_forward/post_forward around each layer, backward in
// reverse with pre_backward/post_backward, accumulating gradients into the
// runtime's buffers, then dmuon_runtime_step.
#include "TinyModel.h"
#include "TinyRuntime.h"

#include "dmuon/dmuon.hpp"

#include <mpi.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <vector>

namespace {

struct Flags {
  std::string plan;
  int steps = 50;
  double lr = std::numeric_limits<double>::quiet_NaN();       // Muon; NaN: the plan's
  double adamwLr = std::numeric_limits<double>::quiet_NaN();  // NaN: the plan's
  uint64_t seed = 1;
  dmuon_mode_t mode = DMUON_MODE_FROM_PLAN;
  int replicateAsync = -1; // -1: plan, 0: --sync, 1: --async
  double minLossDrop = 0;  // > 0: exit 1 unless first/last loss >= this
};

void usage(FILE *out) {
  std::fprintf(out,
               "usage: dmuon-trainer --plan PLAN [--steps N] [--lr LR] [--adamw-lr LR]\n"
               "                     [--seed S] [--mode z2|z3] [--sync|--async]\n"
               "                     [--min-loss-drop F]\n"
               "Trains a tiny residual MLP with libdmuon over MPI_COMM_WORLD.\n"
               "  --plan PLAN        plan compiled by dmuonc for this world size\n"
               "  --steps N          training steps (default 50)\n"
               "  --lr LR            Muon learning rate (default: the plan's)\n"
               "  --adamw-lr LR      AdamW learning rate (default: the plan's)\n"
               "  --seed S           seed of the initial params and the data (default 1)\n"
               "  --mode z2|z3       packed-buffer lifetime (default: the plan's)\n"
               "  --sync, --async    replicate broadcast after the step (default: the plan's)\n"
               "  --min-loss-drop F  fail unless the loss falls by at least F times\n");
}

bool parseFlags(int argc, char **argv, Flags &f, std::string &err) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    bool hasInline = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      hasInline = true;
    }
    auto next = [&](std::string &out) {
      if (hasInline) {
        out = value;
        return true;
      }
      if (i + 1 >= argc) {
        err = "missing value for " + a;
        return false;
      }
      out = argv[++i];
      return true;
    };
    auto number = [&](double &out) {
      std::string s;
      if (!next(s))
        return false;
      char *end = nullptr;
      out = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0') {
        err = "invalid number '" + s + "' for " + a;
        return false;
      }
      return true;
    };
    double d = 0;
    std::string s;
    if (a == "--help" || a == "-h") {
      usage(stdout);
      std::exit(0);
    } else if (a == "--plan") {
      if (!next(f.plan))
        return false;
    } else if (a == "--steps") {
      if (!number(d))
        return false;
      if (d < 1 || d != std::floor(d)) {
        err = "--steps must be a positive integer";
        return false;
      }
      f.steps = static_cast<int>(d);
    } else if (a == "--lr") {
      if (!number(f.lr))
        return false;
    } else if (a == "--adamw-lr") {
      if (!number(f.adamwLr))
        return false;
    } else if (a == "--seed") {
      if (!number(d))
        return false;
      if (d < 0 || d != std::floor(d)) {
        err = "--seed must be a non-negative integer";
        return false;
      }
      f.seed = static_cast<uint64_t>(d);
    } else if (a == "--mode") {
      if (!next(s))
        return false;
      if (s == "z2")
        f.mode = DMUON_MODE_Z2;
      else if (s == "z3")
        f.mode = DMUON_MODE_Z3;
      else {
        err = "--mode must be z2 or z3, not '" + s + "'";
        return false;
      }
    } else if (a == "--sync" && !hasInline) {
      f.replicateAsync = 0;
    } else if (a == "--async" && !hasInline) {
      f.replicateAsync = 1;
    } else if (a == "--min-loss-drop") {
      if (!number(f.minLossDrop))
        return false;
    } else {
      err = "unknown argument '" + std::string(argv[i]) + "'";
      return false;
    }
  }
  if (f.plan.empty()) {
    err = "--plan is required";
    return false;
  }
  return true;
}

const char *kCollectiveNames[DMUON_COLLECTIVE_COUNT] = {"broadcast", "reduce", "replicate",
                                                        "allreduce", "gather",  "scatter"};

std::string human(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

int run(const Flags &flags, int rank, int world) {
  dmuon::Plan plan(flags.plan);
  tiny::Config cfg;
  tiny::PlanBinding binding(plan, cfg);
  if (cfg.globalBatch % world != 0)
    throw std::runtime_error("the global batch (" + std::to_string(cfg.globalBatch) +
                             ") does not split evenly over " + std::to_string(world) + " ranks");
  const int64_t local = cfg.globalBatch / world;

  MPI_Comm comm = MPI_COMM_WORLD;
  dmuon_runtime_options_t opt;
  dmuon_runtime_options_init(&opt);
  opt.backend = DMUON_BACKEND_MPI;
  opt.communicator = &comm;
  opt.mode = flags.mode;
  opt.replicate_async = flags.replicateAsync;
  opt.lr = flags.lr;
  opt.adamw_lr = flags.adamwLr;
  dmuon::Runtime rt(plan, opt);
  tiny::bindInitialParams(rt, cfg, flags.seed);

  if (rank == 0)
    std::printf("dmuon-trainer: %s, %d ranks, %d params (%d hook groups), global batch %" PRId64
                " (%" PRId64 " per rank), %d steps\n",
                flags.plan.c_str(), world, plan.numParams(), plan.numHookGroups(),
                cfg.globalBatch, local, flags.steps);

  tiny::Data data(cfg, flags.seed);
  tiny::Model model(cfg, local);
  tiny::RuntimeAccess access(rt, binding);
  std::vector<float> x(static_cast<size_t>(local * cfg.inDim));
  std::vector<float> t(static_cast<size_t>(local * cfg.outDim));

  double first = 0, last = 0;
  for (int step = 0; step < flags.steps; ++step) {
    data.batch(step, rank * local, local, x.data(), t.data());
    float mine = model.forwardBackward(access, x.data(), t.data());
    rt.step();
    // Slices are equal, so the mean of the ranks' means is the global mean.
    double sum = 0, value = mine;
    MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double loss = sum / world;
    if (step == 0)
      first = loss;
    last = loss;
    if (rank == 0) {
      std::printf("step %4d  loss %.6f\n", step, loss);
      std::fflush(stdout);
    }
  }
  rt.synchronize();

  // Per-rank figures, printed by rank 0 in rank order.
  dmuon_comm_counters_t c = rt.commCounters();
  std::vector<double> mineFig;
  mineFig.push_back(rt.nsFlops());
  for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k)
    mineFig.push_back(static_cast<double>(c.sent[k]));
  for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k)
    mineFig.push_back(static_cast<double>(c.received[k]));
  const int n = static_cast<int>(mineFig.size());
  std::vector<double> all(rank == 0 ? static_cast<size_t>(n * world) : 0);
  MPI_Gather(mineFig.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("loss: %.6f -> %.6f (%.1fx lower) over %d steps\n", first, last,
                last > 0 ? first / last : INFINITY, flags.steps);
    std::printf("per rank over %d steps (NS work; bytes sent / received by collective):\n",
                flags.steps);
    std::printf("%-5s %12s", "rank", "ns_flops");
    for (const char *name : kCollectiveNames)
      std::printf(" %23s", name);
    std::printf(" %23s\n", "total");
    for (int r = 0; r < world; ++r) {
      const double *f = &all[static_cast<size_t>(r * n)];
      std::printf("%-5d %12.4g", r, f[0]);
      double sent = 0, recv = 0;
      for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k) {
        std::string cell = human(f[1 + k]) + " / " + human(f[1 + DMUON_COLLECTIVE_COUNT + k]);
        std::printf(" %23s", cell.c_str());
        sent += f[1 + k];
        recv += f[1 + DMUON_COLLECTIVE_COUNT + k];
      }
      std::string cell = human(sent) + " / " + human(recv);
      std::printf(" %23s\n", cell.c_str());
    }
  }

  int ok = 1;
  if (flags.minLossDrop > 0 && !(last > 0 && first / last >= flags.minLossDrop)) {
    ok = 0;
    if (rank == 0)
      std::fprintf(stderr, "dmuon-trainer: error: the loss fell %.2fx, less than --min-loss-drop %g\n",
                   last > 0 ? first / last : 0.0, flags.minLossDrop);
  }
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  Flags flags;
  std::string err;
  if (!parseFlags(argc, argv, flags, err)) {
    if (rank == 0) {
      std::fprintf(stderr, "dmuon-trainer: error: %s\n", err.c_str());
      usage(stderr);
    }
    MPI_Finalize();
    return 2;
  }

  int rc = 0;
  try {
    rc = run(flags, rank, world);
  } catch (const std::exception &e) {
    // A failure on one rank would leave the others waiting in a collective.
    std::fprintf(stderr, "dmuon-trainer: rank %d: error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
