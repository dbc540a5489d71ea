// The NCCL backend and CUDA device live in a plugin, libdmuon-nccl.so, that
// libdmuon loads only when a host asks for DMUON_BACKEND_NCCL: libdmuon
// itself never needs the CUDA runtime, so it loads in any process.
#ifndef DMUON_RUNTIME_PLUGINS_NCCLPLUGIN_H
#define DMUON_RUNTIME_PLUGINS_NCCLPLUGIN_H

#include "hal/Backend.h"
#include "hal/Device.h"

#include <memory>

namespace dmuon::rt {

// Bumped whenever Backend, Device or this entry point change, so a stale
// plugin next to a newer libdmuon is refused instead of misbehaving.
constexpr int kNcclPluginAbi = 2; // 2: Device::reserve takes every shape
constexpr const char *kNcclPluginEntry = "dmuon_nccl_plugin_create";
constexpr const char *kNcclPluginFile = "libdmuon-nccl.so";

// The plugin's entry point. On failure returns a status code and writes a
// message into `error`.
using NcclPluginCreateFn = int (*)(int abi, const dmuon_runtime_options_t *options,
                                   Backend **backend, Device **device, char *error,
                                   size_t errorSize);

// Loads the plugin (next to libdmuon, else from the loader's search path)
// and creates the backend and device it provides.
Status createNcclFromPlugin(const dmuon_runtime_options_t &options,
                            std::unique_ptr<Backend> &backend, std::unique_ptr<Device> &device);

} // namespace dmuon::rt

#endif
