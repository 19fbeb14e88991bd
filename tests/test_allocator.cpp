// The CPU allocator: alignment, and the cache that hands a freed large block
// to the next request of the same rounded size.
#include <cstdint>
#include <cstring>

#include "minidl/core/allocator.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {
constexpr size_t kMiB = size_t{1} << 20;
uintptr_t address(void* p) { return reinterpret_cast<uintptr_t>(p); }
}  // namespace

TEST_CASE("CPU allocator: 64-byte aligned small blocks, 2 MiB aligned large ones") {
  Allocator* a = allocator_for(DeviceType::CPU);
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}, kMiB}) {
    void* p = a->allocate(n, kCPU);
    CHECK(address(p) % 64 == 0);
    std::memset(p, 1, n);
    a->deallocate(p);
  }
  for (size_t n : {2 * kMiB, 3 * kMiB + 5}) {
    void* p = a->allocate(n, kCPU);
    CHECK(address(p) % (2 * kMiB) == 0);
    std::memset(p, 1, n);  // the whole block is usable (ASan would catch less)
    a->deallocate(p);
  }
  a->deallocate(nullptr);  // like free(nullptr)
}

TEST_CASE("CPU allocator: a freed large block serves the next request of the same rounded size") {
  Allocator* a = allocator_for(DeviceType::CPU);
  void* p = a->allocate(5 * kMiB, kCPU);       // rounded to 6 MiB
  std::memset(p, 7, 5 * kMiB);
  a->deallocate(p);
  void* other = a->allocate(9 * kMiB, kCPU);   // another size: not that block
  CHECK(other != p);
  void* q = a->allocate(6 * kMiB - 3, kCPU);   // same rounded size: the cached block
  CHECK(q == p);
  void* r = a->allocate(5 * kMiB, kCPU);       // the cached one is taken: a new block
  CHECK(r != q);
  a->deallocate(q);
  a->deallocate(r);
  a->deallocate(other);
}

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
TEST_CASE("CPU allocator: a cached block is poisoned for AddressSanitizer until handed out again") {
  Allocator* a = allocator_for(DeviceType::CPU);
  void* p = a->allocate(4 * kMiB, kCPU);
  a->deallocate(p);
  CHECK(__asan_address_is_poisoned(p));
  void* q = a->allocate(4 * kMiB, kCPU);
  REQUIRE(q == p);
  CHECK_FALSE(__asan_address_is_poisoned(q));
  a->deallocate(q);
}
#endif
