#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "core/check.h"

namespace minidl {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    constexpr size_t kAlignment = 64;
    const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    MINIDL_CHECK(p != nullptr, "CPU allocator: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* ptr) noexcept override { std::free(ptr); }
};

Allocator* g_allocators[kNumDeviceTypes] = {nullptr, nullptr};

}  // namespace

Allocator* allocator_for(DeviceType type) {
  static CpuAllocator cpu;
  if (type == DeviceType::CPU) return &cpu;
  Allocator* a = g_allocators[static_cast<int>(type)];
  MINIDL_CHECK(a != nullptr, "no allocator for device type ", device_type_name(type),
               ": configure with -DMINIDL_CUDA=ON and run on a machine with a GPU");
  return a;
}

void set_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[static_cast<int>(type)] = allocator;
}

}  // namespace minidl
