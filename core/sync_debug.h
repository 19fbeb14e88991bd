// Which operations make the host wait for a device, and what to do about
// them (torch.cuda.set_sync_debug_mode, for every device): a blocking copy
// between host memory and a device (item(), to(kCPU), to_vector(), copy_;
// not non_blocking ones, as in PyTorch) stalls the host until the device's
// queue drains, which in a training loop costs the overlap of host and
// device work. The mode is set through cuda::set_sync_debug_mode
// (core/cuda.h); it applies to the test device (core/test_device.h) too, so
// CPU-only CI can check that a training step never waits.
#pragma once

#include <cstdint>

#include "minidl/core/device.h"

namespace minidl {

enum class SyncDebugMode { kDefault = 0, kWarn = 1, kError = 2 };

SyncDebugMode sync_debug_mode();

// Called by the ops that make the host wait for `device` (never the CPU):
// counts it, then under kWarn prints "UserWarning: called a synchronizing
// CUDA operation (...)" to stderr and under kError throws minidl::Error with
// that message (PyTorch's wording; `what` says which operation).
void warn_or_error_on_sync(Device device, const char* what);

// How many synchronizing operations this process has made, in any mode.
int64_t synchronizing_operations();

}  // namespace minidl
