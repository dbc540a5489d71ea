// Which CUDA device a NCCL runtime runs on. The host names it three times:
// options.device, the device its communicator was created on
// (ncclCommCuDevice) and the device of its compute stream. They must agree:
// a runtime that allocates on one device and launches NCCL kernels for
// another fails far from the cause, or silently moves the host thread to the
// wrong GPU. Plain C++ (no CUDA) so that the rules are unit-tested on the CPU
// (test/unit/GpuHostLogicTest.cpp); the plugin queries the two devices and
// calls these.
#ifndef DMUON_RUNTIME_DEVICES_CUDA_DEVICECHOICE_H
#define DMUON_RUNTIME_DEVICES_CUDA_DEVICECHOICE_H

#include "base/Status.h"

#include <string>

namespace dmuon::rt {

// options.device: the communicator's device.
constexpr int kDeviceOfCommunicator = -1;

// Before any CUDA call: the ordinal is a device (>= 0) or "the
// communicator's" (-1).
inline Status checkDeviceOption(int device) {
  if (device < kDeviceOfCommunicator)
    return invalidArgument("options.device is " + std::to_string(device) +
                           "; pass a CUDA device ordinal, or -1 for the communicator's device");
  return Status::ok();
}

// The runtime's device from the three the host named.
inline Status resolveDevice(int optionDevice, int communicatorDevice, int streamDevice,
                            int &out) {
  DMUON_RETURN_IF_ERROR(checkDeviceOption(optionDevice));
  if (optionDevice != kDeviceOfCommunicator && optionDevice != communicatorDevice)
    return invalidArgument("options.device is " + std::to_string(optionDevice) +
                           " but the NCCL communicator was created on device " +
                           std::to_string(communicatorDevice) +
                           "; pass the communicator's device (or -1 to use it)");
  if (streamDevice != communicatorDevice)
    return invalidArgument("options.stream belongs to device " + std::to_string(streamDevice) +
                           " but the NCCL communicator was created on device " +
                           std::to_string(communicatorDevice) +
                           "; pass a compute stream of the communicator's device");
  out = communicatorDevice;
  return Status::ok();
}

} // namespace dmuon::rt

#endif
