// A stalled peer under collective_timeout_s: every collective call of the C
// ABI that is not a hook (checkpoint save and load, set_hyper_params,
// set_param_group_scale) returns DMUON_ERROR_BACKEND ("timed out") on every
// other rank within twice the deadline, instead of waiting for the stall and
// then returning success. Run under mpirun on 4 ranks:
//   dmuon-stall-test <tiny-4.plan> <work dir>
#include "MpiCheck.h"
#include "TinyModel.h"
#include "TinyRuntime.h"
#include "dmuon/dmuon.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

namespace {

constexpr double kDeadlineS = 2.0;
// Longer than twice the deadline: a call that waited for the stall fails the
// time check even if it then succeeded.
constexpr double kStallS = 4.5;

void expect(bool ok, const std::string &what) {
  if (!ok)
    mpicheck::fail("%s", what.c_str());
}

struct Case {
  const char *name;
  // Runs before the stall on every rank, with no peer stalled.
  std::function<void(dmuon::Runtime &)> prepare;
  std::function<dmuon_status_t(dmuon_runtime_t)> call;
};

void runCase(const Case &c, const dmuon::Plan &plan, int victim) {
  MPI_Comm comm = MPI_COMM_WORLD;
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.communicator = &comm;
  o.collective_timeout_s = kDeadlineS;
  {
    dmuon::Runtime rt(plan, o);
    tiny::bindInitialParams(rt, tiny::Config{}, 1);
    if (c.prepare)
      c.prepare(rt);
    MPI_Barrier(MPI_COMM_WORLD);
    if (mpicheck::gRank == victim) {
      std::this_thread::sleep_for(std::chrono::duration<double>(kStallS));
      // Late: it meets what the peers left in flight, then times out itself.
      (void)c.call(rt.get());
    } else {
      const auto start = std::chrono::steady_clock::now();
      const dmuon_status_t st = c.call(rt.get());
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string msg = dmuon_runtime_last_error(rt.get());
      expect(st == DMUON_ERROR_BACKEND,
             std::string(c.name) + " with a stalled peer returns DMUON_ERROR_BACKEND, not " +
                 std::to_string(st) + " (" + msg + ")");
      expect(msg.find("timed out after 2") != std::string::npos,
             std::string(c.name) + ": the message says it timed out: " + msg);
      expect(waited < 2 * kDeadlineS, std::string(c.name) + " returned after " +
                                          std::to_string(waited) + " s, more than twice the " +
                                          std::to_string(kDeadlineS) + " s deadline");
      mpicheck::info("%s: status %d after %.2f s: %s", c.name, st, waited, msg.c_str());
    }
    MPI_Barrier(MPI_COMM_WORLD); // the host's world: every rank is done with this case
  }                              // destroyed with collectives in flight
}

} // namespace

int runTests(int argc, char **argv) {
  if (argc < 3) {
    if (mpicheck::gRank == 0)
      std::fprintf(stderr, "usage: dmuon-stall-test <tiny-4.plan> <work dir>\n");
    return 2;
  }
  const std::string work = argv[2];
  std::filesystem::create_directories(work);
  const int victim = 3;
  dmuon::Plan plan(argv[1]);
  const Case cases[] = {
      {"checkpoint_save", nullptr,
       [&](dmuon_runtime_t rt) { return dmuon_checkpoint_save(rt, (work + "/save").c_str(), 1); }},
      {"checkpoint_load", [&](dmuon::Runtime &rt) { rt.saveCheckpoint(work + "/load", 1); },
       [&](dmuon_runtime_t rt) {
         return dmuon_checkpoint_load(rt, (work + "/load").c_str(), nullptr);
       }},
      {"set_hyper_params", nullptr,
       [](dmuon_runtime_t rt) {
         dmuon_hyper_params_t h;
         dmuon_hyper_params_init(&h);
         h.lr = 0.01;
         return dmuon_runtime_set_hyper_params(rt, &h);
       }},
      {"set_param_group_scale", nullptr,
       [](dmuon_runtime_t rt) { return dmuon_runtime_set_param_group_scale(rt, "*", 0.5, 1); }},
  };
  for (const Case &c : cases)
    runCase(c, plan, victim);
  return 0;
}

int main(int argc, char **argv) { return mpicheck::runMain(argc, argv, runTests); }
