// The trainers' process group: MPI_COMM_WORLD, or one process without MPI.
//
// dmuon-trainer (the MPI backend) always runs on MPI. dmuon-trainer-cuda
// runs on MPI only when an MPI launcher started it (mpirun, mpiexec, srun:
// launchedByMpi() below), and otherwise as one process that never calls
// MPI_Init: world size 1, its NCCL communicator made from a local
// ncclGetUniqueId. A build without MPI (-DDMUON_ENABLE_MPI=OFF, the GPU
// bundle) has only the single-process world and refuses a launcher's world
// of several ranks.
#ifndef DMUON_EXAMPLES_TRAINERWORLD_H
#define DMUON_EXAMPLES_TRAINERWORLD_H

#include <memory>

namespace tiny {

class World {
public:
  virtual ~World() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Collectives over every rank, in the same order on each.
  virtual void sum(double *inout, int n) = 0;
  virtual void max(double *inout, int n) = 0;
  virtual int min(int value) = 0;
  // Rank 0 receives every rank's n values in rank order into `all`.
  virtual void gather(const double *mine, int n, double *all) = 0;
  virtual void broadcast(void *bytes, int size, int root) = 0;
  // This rank's index among the ranks on its node.
  virtual int localRank() = 0;
  // Ends every rank of the world (a failure on one rank would leave the
  // others waiting in a collective).
  [[noreturn]] virtual void abort(int status) = 0;

protected:
  World(int rank, int size) : rank_(rank), size_(size) {}

private:
  int rank_, size_;
};

// Whether an MPI launcher started this process: Open MPI's, PMIx's or
// MPICH/Hydra's (and Slurm's PMI) environment variables are set.
bool launchedByMpi();

// The world a trainer runs on: MPI's when `alwaysMpi` or launchedByMpi(),
// else one process. Throws when MPI is needed and this build has none.
std::unique_ptr<World> openWorld(bool alwaysMpi, int *argc, char ***argv);

// MPI_Init and MPI_COMM_WORLD (TrainerWorldMpi.cpp, MPI builds only).
std::unique_ptr<World> openMpiWorld(int *argc, char ***argv);

} // namespace tiny

#endif
