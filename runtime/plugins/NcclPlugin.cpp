// libdmuon-nccl.so: the NCCL backend and the CUDA device behind one entry point.
#include "plugins/NcclPlugin.h"

#include "backends/nccl/NcclBackend.h"
#include "devices/cuda/CudaDevice.h"
#include "devices/cuda/DeviceChoice.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <new>
#include <string>

namespace dmuon::rt {
namespace {

// options.device against the communicator's and the stream's devices
// (DeviceChoice.h); the option's own check and the null checks come before
// any CUDA or NCCL call.
Status resolveNcclDevice(void *communicator, void *stream, int optionDevice, int &device) {
  DMUON_RETURN_IF_ERROR(checkDeviceOption(optionDevice));
  if (!communicator)
    return invalidArgument("options.communicator is null; pass a pointer to an ncclComm_t");
  if (!stream)
    return invalidArgument("options.stream is null; pass the host's compute cudaStream_t");
  int commDevice = -1;
  ncclComm_t world = *static_cast<ncclComm_t *>(communicator);
  const ncclResult_t r = ncclCommCuDevice(world, &commDevice);
  if (r != ncclSuccess)
    return backendError(std::string("ncclCommCuDevice failed: ") + ncclGetErrorString(r));
  int streamDevice = commDevice;
#if CUDART_VERSION >= 12080 // cudaStreamGetDevice is CUDA 12.8's
  const cudaError_t e = cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &streamDevice);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return invalidArgument(std::string("options.stream is not a usable cudaStream_t: ") +
                           cudaGetErrorString(e));
  }
#endif
  return resolveDevice(optionDevice, commDevice, streamDevice, device);
}

} // namespace
} // namespace dmuon::rt

extern "C" DMUON_API int dmuon_nccl_plugin_create(int abi, const dmuon_runtime_options_t *options,
                                                  dmuon::rt::Backend **backend,
                                                  dmuon::rt::Device **device, char *error,
                                                  size_t errorSize) {
  using namespace dmuon::rt;
  auto fail = [&](const Status &s) {
    std::snprintf(error, errorSize, "%s", s.message().c_str());
    return static_cast<int>(s.code());
  };
  if (Status s = checkNcclPluginAbi(abi); !s)
    return fail(s);
  try {
    int cudaDevice = -1;
    Status s = resolveNcclDevice(options->communicator, options->stream, options->device,
                                 cudaDevice);
    if (!s)
      return fail(s);
    std::unique_ptr<Device> dev;
    s = createCudaDevice(cudaDevice, options->stream, dev);
    if (!s)
      return fail(s);
    std::unique_ptr<Backend> be;
    s = createNcclBackend(options->communicator, options->stream, cudaDevice,
                          options->collective_timeout_s, be);
    if (!s)
      return fail(s);
    *device = dev.release();
    *backend = be.release();
    return DMUON_SUCCESS;
  } catch (const std::bad_alloc &) {
    return fail(Status(DMUON_ERROR_OUT_OF_MEMORY, "out of host memory"));
  } catch (const std::exception &e) {
    return fail(Status(DMUON_ERROR_INTERNAL, std::string("internal error: ") + e.what()));
  }
}
