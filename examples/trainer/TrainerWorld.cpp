#include "TrainerWorld.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tiny {

namespace {

// The launchers' variables, and the world size each gives (PMIx's gives
// none: 0).
struct LauncherVar {
  const char *name;
  bool isSize;
};
constexpr LauncherVar kLauncherVars[] = {
    {"OMPI_COMM_WORLD_SIZE", true}, // Open MPI's mpirun
    {"PMI_SIZE", true},             // MPICH/Hydra, Intel MPI, Slurm's PMI
    {"PMIX_RANK", false},           // PMIx: Open MPI 5, srun --mpi=pmix
};

class SingleProcessWorld final : public World {
public:
  SingleProcessWorld() : World(0, 1) {}
  void sum(double *, int) override {}
  void max(double *, int) override {}
  int min(int value) override { return value; }
  void gather(const double *mine, int n, double *all) override {
    std::memcpy(all, mine, static_cast<size_t>(n) * sizeof(double));
  }
  void broadcast(void *, int, int) override {}
  int localRank() override { return 0; }
  [[noreturn]] void abort(int status) override { std::exit(status); }
};

} // namespace

bool launchedByMpi() {
  for (const LauncherVar &v : kLauncherVars)
    if (std::getenv(v.name))
      return true;
  return false;
}

std::unique_ptr<World> openWorld(bool alwaysMpi, int *argc, char ***argv) {
#if DMUON_TRAINER_HAVE_MPI
  if (alwaysMpi || launchedByMpi())
    return openMpiWorld(argc, argv);
#else
  (void)argc;
  (void)argv;
  if (alwaysMpi)
    throw std::runtime_error("this trainer needs MPI, and this build has none "
                             "(-DDMUON_ENABLE_MPI=OFF)");
  // Started by a launcher as one of several ranks: those ranks could not
  // meet without MPI, so none of them starts.
  for (const LauncherVar &v : kLauncherVars) {
    const char *value = std::getenv(v.name);
    if (v.isSize && value && std::atoi(value) > 1)
      throw std::runtime_error(std::string("started by an MPI launcher as one of ") + value +
                               " ranks (" + v.name + "), but built without MPI "
                               "(-DDMUON_ENABLE_MPI=OFF): run one process without the launcher");
  }
#endif
  return std::make_unique<SingleProcessWorld>();
}

} // namespace tiny
