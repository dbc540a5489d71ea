// libdmuon-nccl.so: the NCCL backend and the CUDA device behind one entry point.
#include "plugins/NcclPlugin.h"

#include "backends/nccl/NcclBackend.h"
#include "devices/cuda/CudaDevice.h"

#include <cstdio>
#include <new>

extern "C" DMUON_API int dmuon_nccl_plugin_create(int abi, const dmuon_runtime_options_t *options,
                                                  dmuon::rt::Backend **backend,
                                                  dmuon::rt::Device **device, char *error,
                                                  size_t errorSize) {
  using namespace dmuon::rt;
  auto fail = [&](const Status &s) {
    std::snprintf(error, errorSize, "%s", s.message().c_str());
    return static_cast<int>(s.code());
  };
  if (abi != kNcclPluginAbi)
    return fail(unsupported("libdmuon-nccl.so was built for plugin ABI " +
                            std::to_string(kNcclPluginAbi) + " but libdmuon expects " +
                            std::to_string(abi) + "; install matching versions"));
  try {
    std::unique_ptr<Device> dev;
    Status s = createCudaDevice(options->device, options->stream, dev);
    if (!s)
      return fail(s);
    std::unique_ptr<Backend> be;
    s = createNcclBackend(options->communicator, options->stream, options->device, be);
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
