// The CPU backend: MPI non-blocking collectives (MPI_Ibcast, MPI_Ireduce,
// MPI_Iallreduce) on communicators split from the host's.
#ifndef DMUON_RUNTIME_BACKENDS_MPI_MPIBACKEND_H
#define DMUON_RUNTIME_BACKENDS_MPI_MPIBACKEND_H

#include "hal/Backend.h"

#include <memory>

namespace dmuon::rt {

// `communicator` points at the host's MPI_Comm; the host keeps ownership.
Status createMpiBackend(void *communicator, std::unique_ptr<Backend> &out);

} // namespace dmuon::rt

#endif
