#include "plugins/NcclPlugin.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace dmuon::rt {

namespace {

std::string libraryDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&createNcclFromPlugin), &info) == 0 || !info.dli_fname)
    return {};
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

} // namespace

Status ncclPluginEntry(const char *name, void *&entry) {
  // Loaded once and kept for the life of the process: runtimes may come and
  // go, and threads may create runtimes at the same time.
  static std::mutex loading;
  static void *handle = nullptr;
  static std::string loadError;
  std::lock_guard<std::mutex> lock(loading);
  if (!handle) {
    std::string beside = libraryDirectory() + kNcclPluginFile;
    handle = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      loadError = dlerror();
      handle = dlopen(kNcclPluginFile, RTLD_NOW | RTLD_LOCAL);
    }
    if (!handle)
      return unsupported("the NCCL backend is not available: cannot load " +
                         std::string(kNcclPluginFile) + " (" + loadError +
                         "); build dmuon with CUDA and NCCL");
  }
  entry = dlsym(handle, name);
  if (!entry)
    return unsupported(std::string(kNcclPluginFile) + " has no entry point " + name +
                       "; install a libdmuon-nccl.so of the same dmuon version as libdmuon");
  return Status::ok();
}

Status createNcclFromPlugin(const dmuon_runtime_options_t &options,
                            std::unique_ptr<Backend> &backend, std::unique_ptr<Device> &device) {
  void *entry = nullptr;
  DMUON_RETURN_IF_ERROR(ncclPluginEntry(kNcclPluginEntry, entry));
  Backend *b = nullptr;
  Device *d = nullptr;
  DMUON_RETURN_IF_ERROR(
      callNcclPlugin(reinterpret_cast<NcclPluginCreateFn>(entry), &options, &b, &d));
  backend.reset(b);
  device.reset(d);
  return Status::ok();
}

} // namespace dmuon::rt
