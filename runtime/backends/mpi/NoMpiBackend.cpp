// createMpiBackend in a libdmuon built without MPI (-DDMUON_ENABLE_MPI=OFF,
// e.g. the GPU bundle of scripts/gpu-bundle, whose GPU machine has no MPI):
// asking for the MPI backend is an error that says so; the NCCL backend is
// unaffected.
#include "backends/mpi/MpiBackend.h"

namespace dmuon::rt {

Status createMpiBackend(void *, std::unique_ptr<Backend> &out) {
  out.reset();
  return unsupported("options.backend is DMUON_BACKEND_MPI, but this libdmuon was built without "
                     "the MPI backend (-DDMUON_ENABLE_MPI=OFF); use DMUON_BACKEND_NCCL");
}

} // namespace dmuon::rt
