#include "minidl/core/test_device.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "minidl/core/allocator.h"
#include "minidl/core/check.h"
#include "minidl/core/dispatch.h"

namespace minidl {

namespace {

class TestDeviceAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    MINIDL_CHECK(device.is_test() && device.index >= 0 && device.index < kNumTestDevices,
                 "test device allocator: there are test:0 to test:", kNumTestDevices - 1, ", got ", device.str());
    constexpr size_t kAlignment = 64;
    const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    MINIDL_CHECK(p != nullptr, "test device: out of memory allocating ", nbytes, " bytes");
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = nbytes;
    stats_.live_blocks += 1;
    stats_.live_bytes += static_cast<int64_t>(nbytes);
    stats_.total_allocations += 1;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes);
    return p;
  }
  void deallocate(void* ptr) noexcept override {
    if (ptr == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(ptr);
      MINIDL_ASSERT(it != live_.end(), "test device: freeing a pointer it did not allocate");
      stats_.live_blocks -= 1;
      stats_.live_bytes -= static_cast<int64_t>(it->second);
      live_.erase(it);
    }
    std::free(ptr);
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.live_bytes;
  }
  TestDeviceMemory stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, size_t> live_;
  TestDeviceMemory stats_;
};

TestDeviceAllocator& test_allocator() {
  static TestDeviceAllocator* a = new TestDeviceAllocator;  // never destroyed: see allocator_for
  return *a;
}

}  // namespace

void register_test_device() {
  for (DispatchStubBase* stub : dispatch_stubs())
    if (stub->has_kernel(DeviceType::CPU)) stub->mirror(DeviceType::CPU, DeviceType::Test);
  set_allocator(DeviceType::Test, &test_allocator());
}

TestDeviceMemory test_device_memory() { return test_allocator().stats(); }

void reset_test_device_peak_memory() { test_allocator().reset_peak(); }

}  // namespace minidl
