// Allocators hand out raw device memory. The CPU one returns 64-byte aligned
// blocks (a cache line, and what AVX-512 loads like). Other backends register
// theirs with set_allocator when they register their kernels (the CUDA
// caching allocator for DeviceType::CUDA, the test device's for Test), so a
// lookup for a non-CPU type registers the backends first.
#pragma once

#include <cstddef>

#include "minidl/core/device.h"

namespace minidl {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // `device` says which device of the allocator's type (the CUDA allocator
  // allocates on that GPU); deallocate finds it from the pointer.
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr) noexcept = 0;
};

// The allocator for a device type; throws if that backend is not built.
Allocator* allocator_for(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);

// Page-locked host memory for asynchronous host<->device copies
// (DataLoaderOptions::pin_memory, Tensor::pin_memory). The CUDA backend fills
// this slot; nullptr where no backend provides one (pinning is then a no-op).
Allocator* pinned_host_allocator();
void set_pinned_host_allocator(Allocator* allocator);

}  // namespace minidl
