// The CUDA caching allocator's policy (core/caching_allocator.h) on the CPU,
// with a fake provider: synthetic addresses (never dereferenced), a byte
// limit to inject OOM, and events the test completes by hand.
#include "minidl/core/caching_allocator.h"

#include <map>
#include <thread>
#include <vector>

#include "tests/test_util.h"

using namespace minidl;

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr StreamId kS1 = 1, kS2 = 2, kS3 = 3;

uintptr_t address(void* p) { return reinterpret_cast<uintptr_t>(p); }

class FakeProvider : public DeviceMemoryProvider {
 public:
  explicit FakeProvider(size_t limit = size_t{1} << 40) : limit_(limit) {}

  void* raw_alloc(size_t nbytes) override {
    if (used_ + nbytes > limit_) return nullptr;
    const uintptr_t addr = next_;
    next_ += nbytes + 2 * kMiB;  // a gap, so segments are never adjacent
    used_ += nbytes;
    live_[addr] = nbytes;
    alloc_sizes.push_back(nbytes);
    return reinterpret_cast<void*>(addr);
  }
  void raw_free(void* ptr) override {
    auto it = live_.find(address(ptr));
    REQUIRE(it != live_.end());  // a double or foreign free is a policy bug
    used_ -= it->second;
    live_.erase(it);
    ++frees;
  }
  size_t free_bytes() override { return limit_ - used_; }
  EventId event_record(StreamId stream) override {
    const EventId id = ++last_event_;
    events_[id] = false;
    recorded_on.push_back(stream);
    return id;
  }
  bool event_query(EventId event) override { return events_.at(event); }
  void event_destroy(EventId event) override { REQUIRE(events_.erase(event) == 1); }

  void complete_events() {
    for (auto& [id, done] : events_) done = true;
  }
  size_t live_segments() const { return live_.size(); }
  size_t used() const { return used_; }
  size_t live_events() const { return events_.size(); }

  std::vector<size_t> alloc_sizes;  // every raw_alloc that succeeded
  std::vector<StreamId> recorded_on;
  int frees = 0;

 private:
  size_t limit_;
  size_t used_ = 0;
  uintptr_t next_ = uintptr_t{1} << 32;
  std::map<uintptr_t, size_t> live_;
  std::map<EventId, bool> events_;
  EventId last_event_ = 0;
};

}  // namespace

TEST_CASE("caching allocator: 512 B rounding and PyTorch's segment sizes") {
  CHECK(DeviceCachingAllocator::round_size(0) == 512);
  CHECK(DeviceCachingAllocator::round_size(1) == 512);
  CHECK(DeviceCachingAllocator::round_size(512) == 512);
  CHECK(DeviceCachingAllocator::round_size(513) == 1024);
  CHECK(DeviceCachingAllocator::get_allocation_size(512) == 2 * kMiB);
  CHECK(DeviceCachingAllocator::get_allocation_size(kMiB) == 2 * kMiB);
  CHECK(DeviceCachingAllocator::get_allocation_size(kMiB + 512) == 20 * kMiB);
  CHECK(DeviceCachingAllocator::get_allocation_size(10 * kMiB - 512) == 20 * kMiB);
  CHECK(DeviceCachingAllocator::get_allocation_size(10 * kMiB) == 10 * kMiB);
  CHECK(DeviceCachingAllocator::get_allocation_size(11 * kMiB) == 12 * kMiB);

  // Each request on its own stream, so none reuses another's segment.
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  const std::vector<std::pair<size_t, size_t>> table = {
      {1, 2 * kMiB}, {kMiB, 2 * kMiB}, {kMiB + 1, 20 * kMiB}, {11 * kMiB, 12 * kMiB}};
  std::vector<void*> ptrs;
  StreamId stream = 10;
  for (const auto& entry : table) {
    const size_t request = entry.first, segment = entry.second;
    CAPTURE(request);
    ptrs.push_back(alloc.malloc(request, stream++));
    CHECK(fake.alloc_sizes.back() == segment);
  }
  // 11 MiB takes its whole 12 MiB segment: 1 MiB remaining is not "> 1 MiB".
  CHECK(alloc.memory_allocated() == 512 + kMiB + (kMiB + 512) + 12 * kMiB);
  for (void* p : ptrs) alloc.free(p);
}

TEST_CASE("caching allocator: a freed block is reused on its stream, never on another") {
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  void* p = alloc.malloc(1000, kS1);
  alloc.free(p);
  CHECK(alloc.malloc(1000, kS1) == p);  // same stream: the cached block
  CHECK(fake.alloc_sizes.size() == 1);
  alloc.free(p);
  void* q = alloc.malloc(1000, kS2);   // other stream: a new segment
  CHECK(fake.alloc_sizes.size() == 2);
  CHECK(address(q) - address(p) >= 2 * kMiB);
  alloc.free(q);
  alloc.free(nullptr);
}

TEST_CASE("caching allocator: record_stream delays reuse until the other stream's event completes") {
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  void* p = alloc.malloc(4096, kS1);
  alloc.record_stream(p, kS1);  // its own stream: nothing to wait for
  alloc.record_stream(p, kS2);
  alloc.record_stream(p, kS2);  // once per stream
  alloc.free(p);
  REQUIRE(fake.recorded_on == std::vector<StreamId>{kS2});

  void* q = alloc.malloc(4096, kS1);  // the event is pending: not p
  CHECK(q != p);
  CHECK(fake.alloc_sizes.size() == 1);  // but the segment's remainder
  CHECK(alloc.memory_allocated() == 4096);

  fake.complete_events();
  void* r = alloc.malloc(4096, kS1);  // polled here: p is back
  CHECK(r == p);
  CHECK(fake.live_events() == 0);
  alloc.free(q);
  alloc.free(r);
  alloc.empty_cache();
  CHECK(fake.live_segments() == 0);
}

TEST_CASE("caching allocator: split blocks merge back and the whole segment is released") {
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  SUBCASE("large pool: split only when more than 1 MiB remains") {
    void* a = alloc.malloc(6 * kMiB, kS1);  // 20 MiB segment, 14 MiB remain
    void* b = alloc.malloc(6 * kMiB, kS1);
    CHECK(address(b) == address(a) + 6 * kMiB);
    CHECK(fake.alloc_sizes.size() == 1);
    void* c = alloc.malloc(6 * kMiB, kS1);  // 2 MiB remain: split
    CHECK(address(c) == address(b) + 6 * kMiB);
    void* d = alloc.malloc(kMiB + 512, kS1);  // 1 MiB - 512 would remain: takes all 2 MiB
    CHECK(address(d) == address(c) + 6 * kMiB);
    CHECK(alloc.memory_allocated() == 20 * kMiB);
    CHECK(fake.alloc_sizes.size() == 1);
    alloc.free(a);
    alloc.free(c);
    alloc.free(b);  // merges with both neighbours
    alloc.free(d);
    // One 20 MiB block again: an 18 MiB request fits without a new segment.
    void* e = alloc.malloc(18 * kMiB, kS1);
    CHECK(e == a);
    CHECK(fake.alloc_sizes.size() == 1);
    alloc.free(e);
  }
  SUBCASE("small pool: split when 512 B remain") {
    void* a = alloc.malloc(kMiB, kS1);
    void* b = alloc.malloc(kMiB - 512, kS1);
    void* c = alloc.malloc(512, kS1);  // the last 512 B of the 2 MiB segment
    CHECK(address(c) == address(a) + 2 * kMiB - 512);
    CHECK(fake.alloc_sizes.size() == 1);
    alloc.free(a);
    alloc.free(b);
    alloc.free(c);
  }
  alloc.empty_cache();
  CHECK(fake.live_segments() == 0);
  CHECK(fake.frees == 1);  // returned whole, as one segment
  CHECK(alloc.memory_reserved() == 0);
}

TEST_CASE("caching allocator: empty_cache keeps segments that have live blocks") {
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  void* small = alloc.malloc(1000, kS1);
  void* large = alloc.malloc(5 * kMiB, kS1);
  void* pending = alloc.malloc(3 * kMiB, kS2);
  alloc.record_stream(pending, kS3);
  alloc.free(large);
  alloc.free(pending);  // waits for its event: not cached, not released
  alloc.empty_cache();
  CHECK(alloc.memory_reserved() == 2 * kMiB + 20 * kMiB);
  CHECK(fake.live_segments() == 2);
  fake.complete_events();
  alloc.empty_cache();  // polls the events first
  CHECK(alloc.memory_reserved() == 2 * kMiB);
  alloc.free(small);
  alloc.empty_cache();
  CHECK(fake.live_segments() == 0);
  CHECK(alloc.memory_reserved() == 0);
}

TEST_CASE("caching allocator: OOM frees cached blocks and retries") {
  FakeProvider fake(40 * kMiB);
  DeviceCachingAllocator alloc(&fake);
  alloc.free(alloc.malloc(5 * kMiB, kS1));  // 20 MiB cached on stream 1
  alloc.free(alloc.malloc(5 * kMiB, kS2));  // 20 MiB cached on stream 2: device full
  REQUIRE(fake.used() == 40 * kMiB);
  SUBCASE("one cached segment big enough is freed") {
    void* p = alloc.malloc(11 * kMiB, kS3);  // a 12 MiB segment
    CHECK(fake.frees == 1);
    CHECK(alloc.memory_reserved() == 20 * kMiB + 12 * kMiB);
    alloc.free(p);
  }
  SUBCASE("no single segment is big enough: all cached segments are freed") {
    void* p = alloc.malloc(25 * kMiB, kS3);  // a 26 MiB segment
    CHECK(fake.frees == 2);
    CHECK(alloc.memory_reserved() == 26 * kMiB);
    alloc.free(p);
  }
}

TEST_CASE("caching allocator: the final OOM error says what is allocated, cached and free") {
  FakeProvider fake(30 * kMiB);
  DeviceCachingAllocator alloc(&fake);
  void* a = alloc.malloc(5 * kMiB, kS1);  // 20 MiB segment, 15 MiB of it cached
  // 16 MiB: more than the cached 15 MiB block, and a 16 MiB segment does not fit.
  CHECK_THROWS_CONTAINS(alloc.malloc(16 * kMiB, kS1), "CUDA out of memory. Tried to allocate 16.00 MiB.");
  CHECK_THROWS_CONTAINS(alloc.malloc(16 * kMiB, kS1), "GPU has 10.00 MiB free.");
  CHECK_THROWS_CONTAINS(alloc.malloc(16 * kMiB, kS1), "5.00 MiB is allocated by minidl");
  CHECK_THROWS_CONTAINS(alloc.malloc(16 * kMiB, kS1),
                        "15.00 MiB is reserved by minidl but unallocated");
  // The failed requests changed nothing.
  CHECK(alloc.memory_allocated() == 5 * kMiB);
  CHECK(alloc.memory_reserved() == 20 * kMiB);
  alloc.free(a);
}

TEST_CASE("caching allocator: allocated/reserved stats and their peaks") {
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  void* a = alloc.malloc(1000, kS1);
  CHECK(alloc.memory_allocated() == 1024);
  CHECK(alloc.memory_reserved() == 2 * kMiB);
  void* b = alloc.malloc(3 * kMiB, kS1);
  CHECK(alloc.memory_allocated() == 1024 + 3 * kMiB);
  CHECK(alloc.memory_reserved() == 22 * kMiB);
  alloc.free(a);
  alloc.free(b);
  CHECK(alloc.memory_allocated() == 0);
  CHECK(alloc.memory_reserved() == 22 * kMiB);  // cached, still reserved
  CHECK(alloc.max_memory_allocated() == 1024 + 3 * kMiB);
  alloc.reset_peak_memory_stats();
  CHECK(alloc.max_memory_allocated() == 0);
  CHECK(alloc.max_memory_reserved() == 22 * kMiB);
  alloc.empty_cache();
  CHECK(alloc.memory_reserved() == 0);
  CHECK(alloc.max_memory_reserved() == 22 * kMiB);
  alloc.reset_peak_memory_stats();
  CHECK(alloc.max_memory_reserved() == 0);
}

TEST_CASE("caching allocator: no_caching sends every malloc and free to the provider") {
  FakeProvider fake(10 * kMiB);
  DeviceCachingAllocator alloc(&fake, DeviceCachingAllocatorOptions{.no_caching = true});
  CHECK(alloc.no_caching());
  void* p = alloc.malloc(1000, kS1);
  CHECK(fake.alloc_sizes == std::vector<size_t>{1000});  // not rounded, no segment
  CHECK(alloc.memory_allocated() == 1000);
  CHECK(alloc.memory_reserved() == 1000);
  alloc.record_stream(p, kS2);  // nothing to defer: the memory is not reused
  alloc.free(p);
  CHECK(fake.live_segments() == 0);
  CHECK(fake.recorded_on.empty());
  CHECK(alloc.memory_reserved() == 0);
  alloc.free(alloc.malloc(1000, kS1));
  CHECK(fake.alloc_sizes.size() == 2);
  CHECK_THROWS_CONTAINS(alloc.malloc(11 * kMiB, kS1), "Tried to allocate 11.00 MiB");
  CHECK(alloc.max_memory_allocated() == 1000);
}

TEST_CASE("caching allocator: the destructor returns every segment and event") {
  FakeProvider fake;
  {
    DeviceCachingAllocator alloc(&fake);
    alloc.malloc(1000, kS1);  // leaked by the caller
    void* p = alloc.malloc(5 * kMiB, kS1);
    alloc.record_stream(p, kS2);
    alloc.free(p);  // still waiting for its event
    alloc.free(alloc.malloc(20 * kMiB, kS3));
  }
  CHECK(fake.live_segments() == 0);
  CHECK(fake.live_events() == 0);
}

TEST_CASE("caching allocator: concurrent malloc/free from several threads") {
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  std::vector<std::thread> threads;
  for (StreamId s = 1; s <= 4; ++s) {
    threads.emplace_back([&alloc, s] {
      std::vector<void*> ptrs;
      for (int i = 0; i < 500; ++i) {
        ptrs.push_back(alloc.malloc(static_cast<size_t>(512 * (1 + i % 7)), s));
        if (i % 3 == 0) {
          alloc.free(ptrs.front());
          ptrs.erase(ptrs.begin());
        }
      }
      for (void* p : ptrs) alloc.free(p);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(alloc.memory_allocated() == 0);
  alloc.empty_cache();
  CHECK(fake.live_segments() == 0);
}

// ---- CUDA graph private pools (core/caching_allocator.h) --------------------

TEST_CASE("caching allocator: a capture allocates from its own pool, and frees during it stay there") {
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  void* cached = alloc.malloc(1000, kS1);
  alloc.free(cached);  // a cached general block on kS1
  REQUIRE(fake.live_segments() == 1);

  const MempoolId pool = new_mempool_id();
  alloc.begin_allocate_to_pool(pool, kS1);
  CHECK(alloc.capture_underway());
  void* a = alloc.malloc(1000, kS1);
  CHECK(a != cached);  // never the general cache's block: eager code may reuse that one
  CHECK(fake.live_segments() == 2);
  CHECK(alloc.pool_reserved(pool) == 2 * kMiB);
  alloc.free(a);  // freed during capture: back to the pool ...
  void* b = alloc.malloc(1000, kS1);
  CHECK(b == a);  // ... and reused by the same capture, as the replay will
  void* other_stream = alloc.malloc(1000, kS2);  // not the capturing stream: the general cache
  CHECK(alloc.pool_reserved(pool) == 2 * kMiB);
  alloc.end_allocate_to_pool(pool);
  CHECK_FALSE(alloc.capture_underway());

  alloc.free(b);  // after the capture (a graph's output dropped): still the pool's
  void* eager = alloc.malloc(1000, kS1);
  CHECK(eager == cached);  // the general block, not the pool's
  CHECK(alloc.pool_reserved(pool) == 2 * kMiB);
  alloc.free(eager);
  alloc.free(other_stream);
  alloc.release_pool(pool);
}

TEST_CASE("caching allocator: each capture gets its own pool unless it shares an id") {
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  const MempoolId p1 = new_mempool_id(), p2 = new_mempool_id();
  CHECK(p1 != p2);
  CHECK(p1 != 0);
  alloc.begin_allocate_to_pool(p1, kS1);
  void* a = alloc.malloc(1000, kS1);
  alloc.free(a);
  alloc.end_allocate_to_pool(p1);

  alloc.begin_allocate_to_pool(p2, kS1);
  void* b = alloc.malloc(1000, kS1);
  CHECK(b != a);  // p1's free block is p1's graph's memory
  alloc.free(b);
  alloc.end_allocate_to_pool(p2);
  CHECK(alloc.pool_reserved(p1) == 2 * kMiB);
  CHECK(alloc.pool_reserved(p2) == 2 * kMiB);

  // A second graph in p1 (graph_pool_handle shared): p1's blocks serve it.
  alloc.begin_allocate_to_pool(p1, kS1);
  void* c = alloc.malloc(1000, kS1);
  CHECK(c == a);
  alloc.free(c);
  alloc.end_allocate_to_pool(p1);
  CHECK(fake.live_segments() == 2);
  alloc.release_pool(p1);
  CHECK(alloc.pool_reserved(p1) == 2 * kMiB);  // the second graph still holds it
  alloc.release_pool(p1);
  CHECK(alloc.pool_reserved(p1) == 0);
  alloc.release_pool(p2);
  CHECK(fake.live_segments() == 0);
  CHECK(alloc.memory_reserved() == 0);
}

TEST_CASE("caching allocator: releasing a pool returns its segments once their blocks are free") {
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  const MempoolId pool = new_mempool_id();
  alloc.begin_allocate_to_pool(pool, kS1);
  void* small = alloc.malloc(1000, kS1);
  void* large = alloc.malloc(3 * kMiB, kS1);  // a 20 MiB segment
  alloc.end_allocate_to_pool(pool);
  alloc.free(small);
  CHECK(fake.live_segments() == 2);
  CHECK(alloc.memory_reserved() == 22 * kMiB);

  alloc.release_pool(pool);  // the graph died; `large` is an output still alive
  CHECK(fake.live_segments() == 1);
  CHECK(alloc.pool_reserved(pool) == 20 * kMiB);
  alloc.free(large);  // its segment goes back at once
  CHECK(fake.live_segments() == 0);
  CHECK(alloc.pool_reserved(pool) == 0);
  CHECK(alloc.memory_reserved() == 0);
  CHECK(alloc.memory_allocated() == 0);
  CHECK_THROWS_WITH_AS(alloc.release_pool(pool), doctest::Contains("no live pool"), Error);
}

TEST_CASE("caching allocator: during a capture no event is queried or recorded and nothing is freed") {
  FakeProvider fake(30 * kMiB);
  DeviceCachingAllocator alloc(&fake);
  void* used_elsewhere = alloc.malloc(1000, kS1);
  alloc.record_stream(used_elsewhere, kS2);
  void* big = alloc.malloc(15 * kMiB, kS1);
  alloc.free(big);  // cached: an OOM outside a capture would free it
  const MempoolId pool = new_mempool_id();
  alloc.begin_allocate_to_pool(pool, kS1);
  alloc.free(used_elsewhere);  // its event waits for the capture's end
  CHECK(fake.recorded_on.empty());
  const int frees_before = fake.frees;
  CHECK_THROWS_WITH_AS(alloc.malloc(13 * kMiB, kS1), doctest::Contains("CUDA out of memory"), Error);
  CHECK(fake.frees == frees_before);  // no cudaFree during capture
  CHECK_THROWS_WITH_AS(alloc.empty_cache(), doctest::Contains("being captured"), Error);
  alloc.end_allocate_to_pool(pool);
  CHECK(fake.recorded_on == std::vector<StreamId>{kS2});  // recorded now
  fake.complete_events();
  alloc.release_pool(pool);
  alloc.empty_cache();
  CHECK(fake.live_segments() == 0);
}

TEST_CASE("caching allocator: pool misuse is a clear error") {
  FakeProvider fake;
  DeviceCachingAllocator alloc(&fake);
  CHECK_THROWS_WITH_AS(alloc.begin_allocate_to_pool(0, kS1), doctest::Contains("0 is not a pool id"), Error);
  const MempoolId pool = new_mempool_id();
  alloc.begin_allocate_to_pool(pool, kS1);
  CHECK_THROWS_WITH_AS(alloc.begin_allocate_to_pool(new_mempool_id(), kS1), doctest::Contains("cannot nest"), Error);
  CHECK_THROWS_WITH_AS(alloc.end_allocate_to_pool(new_mempool_id()), doctest::Contains("no capture underway"), Error);
  alloc.end_allocate_to_pool(pool);
  alloc.release_pool(pool);

  DeviceCachingAllocator uncached(&fake, DeviceCachingAllocatorOptions{.no_caching = true});
  CHECK_THROWS_WITH_AS(uncached.begin_allocate_to_pool(new_mempool_id(), kS1),
                       doctest::Contains("PYTORCH_NO_CUDA_MEMORY_CACHING"), Error);
}
