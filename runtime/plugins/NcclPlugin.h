// The NCCL backend and CUDA device live in a plugin, libdmuon-nccl.so, that
// libdmuon loads only when a host asks for DMUON_BACKEND_NCCL: libdmuon
// itself never needs the CUDA runtime, so it loads in any process.
#ifndef DMUON_RUNTIME_PLUGINS_NCCLPLUGIN_H
#define DMUON_RUNTIME_PLUGINS_NCCLPLUGIN_H

#include "hal/Backend.h"
#include "hal/Device.h"

#include <memory>
#include <string>

namespace dmuon::rt {

// Bumped whenever Backend, Device or this entry point change, so a stale
// plugin next to a newer libdmuon is refused instead of misbehaving.
// 2: Device::reserve takes every shape; 3: the communicator entry points.
constexpr int kNcclPluginAbi = 3;
constexpr const char *kNcclPluginFile = "libdmuon-nccl.so";

// The plugin's entry points. Each takes the ABI libdmuon expects and, on
// failure, returns a status code and writes a message into `error`.
constexpr const char *kNcclPluginEntry = "dmuon_nccl_plugin_create";
using NcclPluginCreateFn = int (*)(int abi, const dmuon_runtime_options_t *options,
                                   Backend **backend, Device **device, char *error,
                                   size_t errorSize);
// dmuon_nccl_unique_id, dmuon_nccl_comm_init_rank and dmuon_nccl_comm_destroy
// (dmuon.h), arguments checked by libdmuon first.
constexpr const char *kNcclPluginUniqueId = "dmuon_nccl_plugin_unique_id";
using NcclPluginUniqueIdFn = int (*)(int abi, void *id, size_t idSize, char *error,
                                     size_t errorSize);
constexpr const char *kNcclPluginCommInit = "dmuon_nccl_plugin_comm_init_rank";
using NcclPluginCommInitFn = int (*)(int abi, void *outCommunicator, int worldSize, const void *id,
                                     size_t idSize, int rank, int device, char *error,
                                     size_t errorSize);
constexpr const char *kNcclPluginCommDestroy = "dmuon_nccl_plugin_comm_destroy";
using NcclPluginCommDestroyFn = int (*)(int abi, void *communicator, char *error, size_t errorSize);

// Loads the plugin (next to libdmuon, else from the loader's search path)
// and creates the backend and device it provides.
Status createNcclFromPlugin(const dmuon_runtime_options_t &options,
                            std::unique_ptr<Backend> &backend, std::unique_ptr<Device> &device);

// The plugin's side of the ABI check every entry point makes first.
inline Status checkNcclPluginAbi(int abi) {
  if (abi == kNcclPluginAbi)
    return Status::ok();
  return unsupported("libdmuon-nccl.so was built for plugin ABI " + std::to_string(kNcclPluginAbi) +
                     " but libdmuon expects " + std::to_string(abi) +
                     "; install matching versions");
}

// The plugin's entry point `name` (loading the plugin if need be), or
// DMUON_ERROR_UNSUPPORTED saying why there is none.
Status ncclPluginEntry(const char *name, void *&entry);

// Calls a plugin entry `fn(kNcclPluginAbi, args..., error, size)` and turns
// its code and message into a Status.
template <typename Fn, typename... Args> Status callNcclPlugin(Fn fn, Args... args) {
  char error[1024] = {0};
  const int code = fn(kNcclPluginAbi, args..., error, sizeof error);
  if (code != DMUON_SUCCESS)
    return {static_cast<dmuon_status_t>(code), error};
  return Status::ok();
}

} // namespace dmuon::rt

#endif
