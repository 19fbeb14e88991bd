#include "core/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "core/check.h"

namespace minidl {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    // Blocks of 2 MiB or more are 2 MiB aligned and marked for transparent huge
    // pages: their first touch then costs one page fault per 2 MiB instead of
    // one per 4 KiB (for a 32 MiB activation, ~8000 faults that cost more than
    // the op writing it). PyTorch does the same when THP_MEM_ALLOC_ENABLE=1.
    constexpr size_t kHugePage = size_t{2} << 20;
    if (nbytes >= kHugePage) {
      const size_t rounded = (nbytes + kHugePage - 1) / kHugePage * kHugePage;
      void* p = std::aligned_alloc(kHugePage, rounded);
      MINIDL_CHECK(p != nullptr, "CPU allocator: out of memory allocating ", nbytes, " bytes");
#ifdef MADV_HUGEPAGE
      madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure only costs speed
#endif
      return p;
    }
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
