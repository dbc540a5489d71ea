// A peer that never joins a collective: with a timeout the waiting rank gets
// DMUON_ERROR_BACKEND ("timed out") instead of hanging, every later call is
// refused, and the runtime is destroyed cleanly. Run under mpirun on 4 ranks.
#include "TinyModel.h"
#include "TinyRuntime.h"
#include "dmuon/dmuon.hpp"

#include <mpi.h>

#include <cstdio>
#include <string>

namespace {

int failures = 0;

void expect(bool ok, int rank, const std::string &what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
    ++failures;
  }
}

// Forward over every hook group and backward down to (not including) group 0.
void stepUpToLastPostBackward(dmuon::Runtime &rt, int groups) {
  for (int g = 0; g < groups; ++g) {
    rt.preForward(g);
    rt.postForward(g);
  }
  for (int g = groups - 1; g >= 0; --g) {
    rt.preBackward(g);
    if (g > 0)
      rt.postBackward(g);
  }
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc < 2) {
    std::fprintf(stderr, "usage: dmuon-fault-test <tiny-4.plan>\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  {
    // Options that differ between ranks, or that one rank refuses, fail on
    // every rank at create instead of deadlocking later.
    dmuon::Plan plan(argv[1]);
    MPI_Comm comm = MPI_COMM_WORLD;
    dmuon_runtime_options_t o;
    dmuon_runtime_options_init(&o);
    o.communicator = &comm;
    o.mode = rank == 2 ? DMUON_MODE_Z2 : DMUON_MODE_Z3;
    dmuon_runtime_t rt = nullptr;
    dmuon_status_t st = dmuon_runtime_create(plan.get(), &o, &rt);
    expect(st == DMUON_ERROR_MISMATCH && rt == nullptr, rank,
           std::string("differing modes are a mismatch on every rank: ") + dmuon_last_error());
    o.mode = DMUON_MODE_FROM_PLAN;
    o.ns_steps = rank == 1 ? 0 : -1;
    st = dmuon_runtime_create(plan.get(), &o, &rt);
    expect(st == DMUON_ERROR_INVALID_ARGUMENT && rt == nullptr, rank,
           std::string("one rank's bad ns_steps fails every rank: ") + dmuon_last_error());
    if (rank == 0)
      std::printf("rank 0: options refused as expected: %s\n", dmuon_last_error());
  }
  {
    tiny::Config cfg;
    dmuon::Plan plan(argv[1]);
    MPI_Comm comm = MPI_COMM_WORLD;
    dmuon_runtime_options_t o;
    dmuon_runtime_options_init(&o);
    o.communicator = &comm;
    o.collective_timeout_s = 1.0;
    dmuon::Runtime rt(plan, o);
    tiny::bindInitialParams(rt, cfg, 1);

    // The victim owns something in hook group 0, so its phase-1 reduce of
    // group 0 needs every peer; the peers skip post_backward(0).
    int victim = -1;
    for (int i = 0; i < plan.numParams() && victim < 0; ++i)
      if (plan.param(i).hook_group == 0)
        victim = plan.param(i).owner_rank;
    const int groups = plan.numHookGroups();
    stepUpToLastPostBackward(rt, groups);
    if (rank == victim) {
      dmuon_status_t st = dmuon_runtime_post_backward(rt.get(), 0);
      if (st == DMUON_SUCCESS)
        st = dmuon_runtime_step(rt.get());
      std::string msg = dmuon_runtime_last_error(rt.get());
      expect(st == DMUON_ERROR_BACKEND, rank, "step without the peers returns DMUON_ERROR_BACKEND");
      expect(msg.find("timed out after 1") != std::string::npos, rank,
             "the message says it timed out: " + msg);
      // The runtime refuses further collectives instead of hanging.
      expect(dmuon_runtime_synchronize(rt.get()) != DMUON_SUCCESS ||
                 dmuon_runtime_pre_forward(rt.get(), 0) != DMUON_SUCCESS,
             rank, "later calls are refused");
      std::printf("rank %d: refused as expected: %s\n", rank, msg.c_str());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // The peers now join the abandoned reduce so that no MPI request stays
    // unmatched at MPI_Finalize.
    if (rank != victim) {
      rt.postBackward(0);
      rt.finishBackward();
    }
  } // every runtime destroyed here, the victim's without waiting on its request
  MPI_Barrier(MPI_COMM_WORLD);
  int worst = 0;
  MPI_Allreduce(&failures, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("fault test: %s\n", worst ? "FAILED" : "passed");
  MPI_Finalize();
  return worst ? 1 : 0;
}
