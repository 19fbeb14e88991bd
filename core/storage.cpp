#include "minidl/core/storage.h"

#include <atomic>

namespace minidl {

namespace {
std::atomic<int64_t> g_created[kNumDeviceTypes];
}  // namespace

Storage::Storage(size_t nbytes, Device device) : Storage(nbytes, device, allocator_for(device.type)) {}

Storage::Storage(size_t nbytes, Device device, Allocator* allocator)
    : nbytes_(nbytes), device_(device), allocator_(allocator) {
  data_ = allocator_->allocate(nbytes, device);
  g_created[static_cast<int>(device.type)].fetch_add(1, std::memory_order_relaxed);
}

int64_t Storage::created(DeviceType type) {
  return g_created[static_cast<int>(type)].load(std::memory_order_relaxed);
}

Storage::~Storage() { allocator_->deallocate(data_); }

}  // namespace minidl
