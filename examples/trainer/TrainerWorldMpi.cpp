// The MPI world of TrainerWorld.h: MPI_COMM_WORLD, initialized here and
// finalized when the world is destroyed. Built only with MPI.
#include "TrainerWorld.h"

#include <mpi.h>

namespace tiny {
namespace {

int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int worldSize() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

class MpiWorld final : public World {
public:
  MpiWorld() : World(worldRank(), worldSize()) {}
  ~MpiWorld() override { MPI_Finalize(); }
  MpiWorld(const MpiWorld &) = delete;
  MpiWorld &operator=(const MpiWorld &) = delete;

  void sum(double *inout, int n) override {
    MPI_Allreduce(MPI_IN_PLACE, inout, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  void max(double *inout, int n) override {
    MPI_Allreduce(MPI_IN_PLACE, inout, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  int min(int value) override {
    int out = value;
    MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return out;
  }
  void gather(const double *mine, int n, double *all) override {
    MPI_Gather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  void broadcast(void *bytes, int size, int root) override {
    MPI_Bcast(bytes, size, MPI_BYTE, root, MPI_COMM_WORLD);
  }
  int localRank() override {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int r = 0;
    MPI_Comm_rank(node, &r);
    MPI_Comm_free(&node);
    return r;
  }
  [[noreturn]] void abort(int status) override {
    MPI_Abort(MPI_COMM_WORLD, status);
    __builtin_unreachable();
  }
};

} // namespace

std::unique_ptr<World> openMpiWorld(int *argc, char ***argv) {
  MPI_Init(argc, argv);
  return std::make_unique<MpiWorld>();
}

} // namespace tiny
