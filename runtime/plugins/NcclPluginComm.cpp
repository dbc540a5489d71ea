// libdmuon-nccl.so's communicator entry points: dmuon_nccl_unique_id,
// dmuon_nccl_comm_init_rank and dmuon_nccl_comm_destroy (dmuon.h) for hosts
// with no NCCL binding of their own. libdmuon checked the arguments that need
// no CUDA (null pointers, sizes, rank range); the device checks are here.
#include "plugins/NcclPlugin.h"

#include "devices/cuda/CudaDeviceGuard.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <string>

static_assert(sizeof(ncclUniqueId) == DMUON_NCCL_UNIQUE_ID_BYTES,
              "dmuon.h's DMUON_NCCL_UNIQUE_ID_BYTES must be this NCCL's ncclUniqueId size");

namespace dmuon::rt {
namespace {

Status ncclFailure(const char *what, ncclResult_t r) {
  return backendError(std::string(what) + " failed: " + ncclGetErrorString(r));
}

// `device` (DMUON_UNSET: the calling thread's current one) as a visible
// CUDA device; a process that sees none is told so before NCCL is.
Status visibleDevice(int device, int &out) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return backendError(std::string("no usable CUDA device for an NCCL communicator: "
                                    "cudaGetDeviceCount failed: ") +
                        cudaGetErrorString(e));
  }
  if (count == 0)
    return backendError("no usable CUDA device for an NCCL communicator: none is visible");
  if (device == DMUON_UNSET) {
    if (cudaGetDevice(&out) != cudaSuccess) {
      cudaGetLastError();
      return backendError("cudaGetDevice failed: no current CUDA device");
    }
    return Status::ok();
  }
  if (device >= count)
    return invalidArgument("device " + std::to_string(device) +
                           " is not visible: this process sees " + std::to_string(count) +
                           " CUDA device(s)");
  out = device;
  return Status::ok();
}

// Runs `body` for an entry point: the ABI check, then its Status as a code
// and message; nothing throws across the boundary.
template <typename F> int entry(int abi, char *error, size_t errorSize, F &&body) {
  auto fail = [&](const Status &s) {
    std::snprintf(error, errorSize, "%s", s.message().c_str());
    return static_cast<int>(s.code());
  };
  try {
    Status s = checkNcclPluginAbi(abi);
    if (s)
      s = body();
    return s ? DMUON_SUCCESS : fail(s);
  } catch (const std::bad_alloc &) {
    return fail(Status(DMUON_ERROR_OUT_OF_MEMORY, "out of host memory"));
  } catch (const std::exception &e) {
    return fail(Status(DMUON_ERROR_INTERNAL, std::string("internal error: ") + e.what()));
  }
}

} // namespace
} // namespace dmuon::rt

using namespace dmuon::rt;

extern "C" DMUON_API int dmuon_nccl_plugin_unique_id(int abi, void *id, size_t idSize, char *error,
                                                     size_t errorSize) {
  return entry(abi, error, errorSize, [&]() -> Status {
    ncclUniqueId u;
    if (const ncclResult_t r = ncclGetUniqueId(&u); r != ncclSuccess)
      return ncclFailure("ncclGetUniqueId", r);
    std::memcpy(id, &u, idSize);
    return Status::ok();
  });
}

extern "C" DMUON_API int dmuon_nccl_plugin_comm_init_rank(int abi, void *outCommunicator,
                                                          int worldSize, const void *id,
                                                          size_t idSize, int rank, int device,
                                                          char *error, size_t errorSize) {
  return entry(abi, error, errorSize, [&]() -> Status {
    int cudaDevice = -1;
    DMUON_RETURN_IF_ERROR(visibleDevice(device, cudaDevice));
    // ncclCommInitRank binds the communicator to the current device.
    DMUON_CUDA_DEVICE_SCOPE(guard, cudaDevice);
    ncclUniqueId u;
    std::memcpy(&u, id, idSize);
    ncclComm_t comm = nullptr;
    if (const ncclResult_t r = ncclCommInitRank(&comm, worldSize, u, rank); r != ncclSuccess)
      return ncclFailure(("ncclCommInitRank (rank " + std::to_string(rank) + " of " +
                          std::to_string(worldSize) + ", device " + std::to_string(cudaDevice) +
                          ")")
                             .c_str(),
                         r);
    *static_cast<ncclComm_t *>(outCommunicator) = comm;
    return Status::ok();
  });
}

extern "C" DMUON_API int dmuon_nccl_plugin_comm_destroy(int abi, void *communicator, char *error,
                                                        size_t errorSize) {
  return entry(abi, error, errorSize, [&]() -> Status {
    ncclComm_t &comm = *static_cast<ncclComm_t *>(communicator);
    if (!comm)
      return Status::ok();
    const ncclResult_t r = ncclCommDestroy(comm);
    comm = nullptr; // destroyed or not, it is not to be used again
    return r == ncclSuccess ? Status::ok() : ncclFailure("ncclCommDestroy", r);
  });
}
