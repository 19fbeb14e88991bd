// The test device (DeviceType::Test, "test"): a second device for CPU-only CI.
//
// Its kernels are the CPU kernels, mirrored into the Test slot of every
// DispatchStub when the kernels register; its memory comes from its own
// allocator (host memory, counted separately). So a model, optimizer or
// process group run on Device("test") behaves exactly as on the CPU, except
// that every place that creates a CPU tensor from a device input, or hands a
// kernel tensors from two devices, shows up: the first as a CPU storage in
// storage_count (tests assert none appear), the second as an error from the
// kernel's dispatch check.
//
// Indices test:0 to test:7 exist (kNumTestDevices), all host memory with the
// same kernels, so multi-device code (nn::DataParallel) runs in CI: a kernel
// handed tensors from test:0 and test:1 fails its dispatch check as it would
// on two GPUs. The memory counters below add up all indices.
//
// What it cannot catch: host code that reads device memory directly through
// data_ptr (the memory is host memory), missing stream ordering or
// synchronization, and anything about real device memory (alignment, size).
#pragma once

#include <cstdint>

#include "minidl/core/device.h"

namespace minidl {

inline constexpr int kNumTestDevices = 8;

// Mirrors every registered CPU kernel into the Test slot and installs the test
// allocator. Called by ensure_kernels_registered after the CPU kernels.
void register_test_device();

// Bytes and blocks the test device's allocator holds now.
struct TestDeviceMemory {
  int64_t live_blocks = 0;
  int64_t live_bytes = 0;
  int64_t total_allocations = 0;
  int64_t peak_bytes = 0;  // the most live_bytes since the last reset (torch.cuda.max_memory_allocated)
};
TestDeviceMemory test_device_memory();
// Sets peak_bytes to the current live_bytes (torch.cuda.reset_peak_memory_stats).
void reset_test_device_peak_memory();

}  // namespace minidl
