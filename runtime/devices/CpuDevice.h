// Host memory and OpenBLAS kernels: the device of the MPI backend.
#ifndef DMUON_RUNTIME_DEVICES_CPUDEVICE_H
#define DMUON_RUNTIME_DEVICES_CPUDEVICE_H

#include "hal/Device.h"

#include <memory>

namespace dmuon::rt {

std::unique_ptr<Device> createCpuDevice();

} // namespace dmuon::rt

#endif
