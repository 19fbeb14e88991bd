// A block of device memory shared by every tensor view of it. It also holds
// the version counter that in-place ops bump, so autograd can tell when a
// tensor saved for backward was modified after it was saved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "minidl/core/allocator.h"
#include "minidl/core/device.h"

namespace minidl {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // Memory from `allocator` instead of the device type's (pinned host memory).
  Storage(size_t nbytes, Device device, Allocator* allocator);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  const Allocator* allocator() const { return allocator_; }

  // How many storages were ever created on devices of `type` (tests use the
  // CPU count to prove a device computation made no CPU tensor).
  static int64_t created(DeviceType type);

  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  uint64_t version_ = 0;
};

}  // namespace minidl
