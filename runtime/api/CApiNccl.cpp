// The C ABI of include/dmuon/dmuon.h, part three: NCCL communicators for
// hosts with no NCCL binding of their own, made through libdmuon-nccl.so
// (plugins/NcclPluginComm.cpp). The arguments that need no CUDA are checked
// here, before the plugin is loaded, so a bad call says what is wrong on a
// machine without NCCL too.
#include "CApiSupport.h"

#include "plugins/NcclPlugin.h"

#include <string>

using dmuon::rt::invalidArgument;
using namespace dmuon::capi;

namespace {

Status checkIdSize(size_t idSize) {
  if (idSize != DMUON_NCCL_UNIQUE_ID_BYTES)
    return invalidArgument("id_size is " + std::to_string(idSize) +
                           "; an NCCL unique id has DMUON_NCCL_UNIQUE_ID_BYTES (" +
                           std::to_string(DMUON_NCCL_UNIQUE_ID_BYTES) + ") bytes");
  return Status::ok();
}

template <typename Fn> Status pluginEntry(const char *name, Fn &fn) {
  void *entry = nullptr;
  DMUON_RETURN_IF_ERROR(dmuon::rt::ncclPluginEntry(name, entry));
  fn = reinterpret_cast<Fn>(entry);
  return Status::ok();
}

} // namespace

extern "C" {

dmuon_status_t dmuon_nccl_unique_id(void *out_id, size_t id_size) {
  return guarded(nullptr, [&]() -> Status {
    if (!out_id)
      return invalidArgument("dmuon_nccl_unique_id: out_id is null");
    DMUON_RETURN_IF_ERROR(checkIdSize(id_size));
    dmuon::rt::NcclPluginUniqueIdFn fn = nullptr;
    DMUON_RETURN_IF_ERROR(pluginEntry(dmuon::rt::kNcclPluginUniqueId, fn));
    return dmuon::rt::callNcclPlugin(fn, out_id, id_size);
  });
}

dmuon_status_t dmuon_nccl_comm_init_rank(void *out_communicator, int world_size, const void *id,
                                         size_t id_size, int rank, int device) {
  return guarded(nullptr, [&]() -> Status {
    if (!out_communicator || !id)
      return invalidArgument("dmuon_nccl_comm_init_rank: out_communicator or id is null");
    DMUON_RETURN_IF_ERROR(checkIdSize(id_size));
    if (world_size < 1)
      return invalidArgument("world_size is " + std::to_string(world_size) +
                             "; an NCCL communicator has at least one rank");
    if (rank < 0 || rank >= world_size)
      return invalidArgument("rank " + std::to_string(rank) + " is outside [0, " +
                             std::to_string(world_size) + ") for world_size " +
                             std::to_string(world_size));
    if (device < DMUON_UNSET)
      return invalidArgument("device is " + std::to_string(device) +
                             "; pass a CUDA device ordinal, or DMUON_UNSET (-1) for the calling "
                             "thread's current device");
    dmuon::rt::NcclPluginCommInitFn fn = nullptr;
    DMUON_RETURN_IF_ERROR(pluginEntry(dmuon::rt::kNcclPluginCommInit, fn));
    return dmuon::rt::callNcclPlugin(fn, out_communicator, world_size, id, id_size, rank, device);
  });
}

dmuon_status_t dmuon_nccl_comm_destroy(void *communicator) {
  return guarded(nullptr, [&]() -> Status {
    if (!communicator)
      return invalidArgument("dmuon_nccl_comm_destroy: communicator is null");
    if (!*static_cast<void **>(communicator))
      return Status::ok(); // never made, or destroyed already: no plugin needed
    dmuon::rt::NcclPluginCommDestroyFn fn = nullptr;
    DMUON_RETURN_IF_ERROR(pluginEntry(dmuon::rt::kNcclPluginCommDestroy, fn));
    return dmuon::rt::callNcclPlugin(fn, communicator);
  });
}

} // extern "C"
