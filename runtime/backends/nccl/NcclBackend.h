// The GPU backend: NCCL collectives on the runtime's own streams (broadcast
// and reduce at high priority, replicate at default priority), ordered
// against the host's compute stream with CUDA events, never blocking the host.
#ifndef DMUON_RUNTIME_BACKENDS_NCCL_NCCLBACKEND_H
#define DMUON_RUNTIME_BACKENDS_NCCL_NCCLBACKEND_H

#include "hal/Backend.h"

#include <memory>

namespace dmuon::rt {

// `communicator` points at the host's ncclComm_t (the world), `stream` is the
// host's compute cudaStream_t; the host keeps ownership of both. `device` is
// the resolved device (devices/cuda/DeviceChoice.h, checked by the plugin).
// The backend on the resolved device. The host's world is used for one
// split only (the runtime's own world); `timeoutSeconds` (0: none) bounds
// that split too.
Status createNcclBackend(void *communicator, void *stream, int device, double timeoutSeconds,
                         std::unique_ptr<Backend> &out);

} // namespace dmuon::rt

#endif
