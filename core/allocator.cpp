#include "minidl/core/allocator.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>

#include "minidl/core/check.h"
#include "minidl/core/cuda.h"
#include "minidl/core/dispatch.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
// A cached block is freed memory as far as the program goes: ASan reports
// any use of it, as it would after free().
#define MINIDL_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define MINIDL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define MINIDL_POISON(p, n) ((void)(p), (void)(n))
#define MINIDL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace minidl {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Freed blocks of 2 MiB or more, kept for the next request of the same
// rounded size. A training step frees and allocates the same activation
// sizes every step, and a fresh block pays for its first touch: the kernel
// zeroes every page it maps (10% of a ResNet-18 training step on 2 cores).
// glibc keeps such blocks itself only below its mmap threshold (at most
// 32 MiB), and not 2 MiB aligned for huge pages. At most kMaxCachedBytes
// wait in the cache; beyond that a freed block goes back to the system.
class LargeBlockCache {
 public:
  static constexpr size_t kMaxCachedBytes = size_t{1} << 30;

  // A cached block of exactly `rounded` bytes, or nullptr.
  void* take(size_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(rounded);
    if (it == free_.end()) return nullptr;
    void* p = it->second;
    free_.erase(it);
    cached_bytes_ -= rounded;
    MINIDL_UNPOISON(p, rounded);
    return p;
  }
  void track(void* p, size_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    size_of_[p] = rounded;
  }
  // Keeps p if it is a large block and there is room; returns whether it did
  // (else the caller frees it).
  bool give_back(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = size_of_.find(p);
    if (it == size_of_.end()) return false;
    const size_t rounded = it->second;
    if (cached_bytes_ + rounded > kMaxCachedBytes) {
      size_of_.erase(it);
      return false;
    }
    free_.emplace(rounded, p);
    cached_bytes_ += rounded;
    MINIDL_POISON(p, rounded);
    return true;
  }

 private:
  std::mutex mu_;
  std::unordered_multimap<size_t, void*> free_;  // rounded size -> cached block
  std::unordered_map<void*, size_t> size_of_;    // every large block, live or cached
  size_t cached_bytes_ = 0;
};

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override {
    // Blocks of 2 MiB or more are 2 MiB aligned and marked for transparent huge
    // pages: their first touch then costs one page fault per 2 MiB instead of
    // one per 4 KiB (for a 32 MiB activation, ~8000 faults that cost more than
    // the op writing it). PyTorch does the same when THP_MEM_ALLOC_ENABLE=1.
    if (nbytes >= kHugePage) {
      const size_t rounded = (nbytes + kHugePage - 1) / kHugePage * kHugePage;
      if (void* p = cache_.take(rounded)) return p;
      void* p = std::aligned_alloc(kHugePage, rounded);
      MINIDL_CHECK(p != nullptr, "CPU allocator: out of memory allocating ", nbytes, " bytes");
#ifdef MADV_HUGEPAGE
      madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure only costs speed
#endif
      cache_.track(p, rounded);
      return p;
    }
    constexpr size_t kAlignment = 64;
    const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    MINIDL_CHECK(p != nullptr, "CPU allocator: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* ptr) noexcept override {
    // Only large blocks are 2 MiB aligned on purpose (a small one may be by chance: the lookup tells).
    if (ptr && reinterpret_cast<uintptr_t>(ptr) % kHugePage == 0 && cache_.give_back(ptr)) return;
    std::free(ptr);
  }

 private:
  LargeBlockCache cache_;
};

Allocator* g_allocators[kNumDeviceTypes] = {};
Allocator* g_pinned_host_allocator = nullptr;

}  // namespace

Allocator* allocator_for(DeviceType type) {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static CpuAllocator* cpu = new CpuAllocator;
  if (type == DeviceType::CPU) return cpu;
  ensure_kernels_registered();  // backends set their allocators when they register
  Allocator* a = g_allocators[static_cast<int>(type)];
  if (a == nullptr) {
    // "minidl was built without CUDA: configure with -DMINIDL_CUDA=ON", or why
    // the built backend did not start ("no CUDA driver: ...").
    MINIDL_CHECK(type != DeviceType::CUDA, "no allocator for device type CUDA: ", cuda::unavailable_reason());
    MINIDL_FAIL("no allocator for device type ", device_type_name(type));
  }
  return a;
}

void set_allocator(DeviceType type, Allocator* allocator) {
  MINIDL_CHECK(type != DeviceType::CPU, "set_allocator: the CPU allocator cannot be replaced");
  g_allocators[static_cast<int>(type)] = allocator;
}

Allocator* pinned_host_allocator() {
  ensure_kernels_registered();
  return g_pinned_host_allocator;
}
void set_pinned_host_allocator(Allocator* allocator) { g_pinned_host_allocator = allocator; }

}  // namespace minidl
