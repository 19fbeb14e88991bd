// Allocators hand out raw device memory. The CPU one returns 64-byte aligned
// blocks (a cache line, and what AVX-512 loads like); the CUDA caching
// allocator will register itself for DeviceType::CUDA.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace minidl {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr) noexcept = 0;
};

// The allocator for a device type; throws if that backend is not built.
Allocator* allocator_for(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);

}  // namespace minidl
