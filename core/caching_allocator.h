// The CUDA caching allocator's policy (PyTorch's DeviceCachingAllocator in
// c10/cuda/CUDACachingAllocator.cpp), as host-only code behind a
// DeviceMemoryProvider. cudaMalloc/cudaFree synchronize the device and are
// slow, so freed blocks are cached per stream and reused; the provider makes
// the policy testable on the CPU with a fake (tests/test_caching_allocator.cpp)
// and the real CUDA provider (core/cuda/) only wraps the runtime calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace minidl {

// Opaque ids: a cudaStream_t / cudaEvent_t for the CUDA provider.
using StreamId = uintptr_t;
using EventId = uintptr_t;
// A CUDA graph's private memory pool (PyTorch's MempoolId_t, one number
// here): 0 is "no pool"; new_mempool_id() hands out fresh ones
// (torch.cuda.graph_pool_handle()).
using MempoolId = uint64_t;
MempoolId new_mempool_id();

// Where device memory and events come from (one device).
class DeviceMemoryProvider {
 public:
  virtual ~DeviceMemoryProvider() = default;
  // nullptr when the device is out of memory (the policy then frees its cache
  // and retries before reporting the OOM).
  virtual void* raw_alloc(size_t nbytes) = 0;
  virtual void raw_free(void* ptr) = 0;
  // Free device memory, for the OOM message.
  virtual size_t free_bytes() = 0;
  // An event recorded now on `stream`; completes when the stream's work so
  // far has run.
  virtual EventId event_record(StreamId stream) = 0;
  virtual bool event_query(EventId event) = 0;
  virtual void event_destroy(EventId event) = 0;
};

// PyTorch's constants (CUDACachingAllocator.cpp).
inline constexpr size_t kMinBlockSize = 512;           // all sizes are rounded to this
inline constexpr size_t kSmallSize = size_t{1} << 20;  // largest "small" request
inline constexpr size_t kSmallBuffer = 2 * kSmallSize;    // segment for small requests
inline constexpr size_t kLargeBuffer = 20 * kSmallSize;   // segment for 1-10 MiB requests
inline constexpr size_t kMinLargeAlloc = 10 * kSmallSize; // above: segment = rounded request
inline constexpr size_t kRoundLarge = 2 * kSmallSize;     // large segments round to this

struct DeviceCachingAllocatorOptions {
  // PYTORCH_NO_CUDA_MEMORY_CACHING=1: every malloc goes to the provider and
  // every free returns to it, so compute-sanitizer sees each buffer's bounds.
  bool no_caching = false;
};

// Thread-safe (one mutex). Not copyable: it owns the provider's segments.
class DeviceCachingAllocator {
 public:
  explicit DeviceCachingAllocator(DeviceMemoryProvider* provider,
                                  DeviceCachingAllocatorOptions options = {});
  ~DeviceCachingAllocator();
  DeviceCachingAllocator(const DeviceCachingAllocator&) = delete;
  DeviceCachingAllocator& operator=(const DeviceCachingAllocator&) = delete;

  // A block of at least `nbytes` for use on `stream`; throws minidl::Error
  // ("CUDA out of memory. ...") when even an empty cache does not help.
  void* malloc(size_t nbytes, StreamId stream);
  // The block goes back to its stream's cache (or waits for the events of
  // record_stream's streams first). free(nullptr) does nothing.
  void free(void* ptr);
  // `ptr` is also used on `stream`: its reuse after free waits for that
  // stream's work queued so far (Tensor.record_stream).
  void record_stream(void* ptr, StreamId stream);
  // Returns every cached segment that has no live block to the provider.
  void empty_cache();

  // PyTorch's names (torch.cuda.memory_allocated etc.), in bytes.
  size_t memory_allocated() const;
  size_t max_memory_allocated() const;
  size_t memory_reserved() const;
  size_t max_memory_reserved() const;
  void reset_peak_memory_stats();

  bool no_caching() const { return options_.no_caching; }

  // ---- CUDA graph private pools (PyTorch's beginAllocateToPool,
  // endAllocateToPool, releasePool) ----
  // A captured graph replays its kernels on the addresses they had at
  // capture, so that memory must stay the graph's for as long as the graph
  // lives, and nothing else may get it. Between begin and end, every malloc
  // on `stream` (the capturing stream) comes from the pool `id`'s own
  // segments; a block freed during capture goes back to that pool only, to be
  // reused later in the same capture (as the graph's replay reuses it) and by
  // nobody else. A pool is held by every capture that began in it (graphs may
  // share one pool: pass the same id) until release_pool; then its segments
  // go back to the provider as soon as no block in them is live (a graph's
  // output tensor may outlive the graph).
  // While a capture is underway the policy never calls what a capture forbids:
  // no event queries (record_stream's blocks wait until the capture ends), no
  // raw_free (no cache release on OOM; empty_cache refuses).
  void begin_allocate_to_pool(MempoolId id, StreamId stream);
  void end_allocate_to_pool(MempoolId id);
  void release_pool(MempoolId id);
  // Bytes of provider segments a pool owns (0 for an unknown or freed pool).
  size_t pool_reserved(MempoolId id) const;
  bool capture_underway() const;

  static size_t round_size(size_t nbytes);
  static size_t get_allocation_size(size_t size);

 private:
  struct BlockPool;
  // A piece of a segment; a segment is a doubly linked list of blocks in
  // address order, so a freed block can merge with free neighbours.
  struct Block {
    Block(StreamId stream, size_t size, uintptr_t addr, BlockPool* pool)
        : stream(stream), size(size), addr(addr), pool(pool) {}
    StreamId stream;
    size_t size;
    uintptr_t addr;
    BlockPool* pool;
    bool allocated = false;
    int event_count = 0;            // outstanding record_stream events
    std::set<StreamId> stream_uses; // record_stream's streams (not `stream`)
    Block* prev = nullptr;
    Block* next = nullptr;
  };
  // Best fit: ordered by (stream, size, address), so lower_bound finds the
  // smallest block of this stream that is large enough.
  struct BlockComparator {
    bool operator()(const Block* a, const Block* b) const;
  };
  struct PrivatePool;
  struct BlockPool {
    std::set<Block*, BlockComparator> blocks;
    bool is_small;
    PrivatePool* owner = nullptr;  // a graph's pool, or nullptr: the general cache
  };
  // A graph's pool: its own small and large blocks, never shared with the
  // general cache. use_count: captures/graphs holding it.
  struct PrivatePool {
    explicit PrivatePool(MempoolId id) : id(id), small{{}, true, this}, large{{}, false, this} {}
    MempoolId id;
    BlockPool small, large;
    int use_count = 1;
    size_t reserved = 0;  // bytes of its provider segments
  };

  Block* get_free_block(size_t size, StreamId stream, BlockPool& pool);
  Block* alloc_block(size_t alloc_size, StreamId stream, BlockPool& pool);
  PrivatePool* capture_pool_for(StreamId stream) const;
  void release_private_segment_if_free(Block* block);
  void release_free_private_segments();
  bool should_split(const Block* block, size_t size) const;
  void free_block(Block* block);
  void try_merge_blocks(Block* dst, Block* src, BlockPool& pool);
  void insert_events(Block* block);
  void process_events();
  bool release_available_cached_blocks(size_t alloc_size, BlockPool& pool);
  void release_cached_blocks();
  void release_block(Block* block);
  [[noreturn]] void throw_oom(size_t nbytes);
  void add_allocated(size_t n);
  void add_reserved(size_t n);

  DeviceMemoryProvider* provider_;
  DeviceCachingAllocatorOptions options_;
  mutable std::mutex mutex_;
  BlockPool small_blocks_{{}, true};
  BlockPool large_blocks_{{}, false};
  std::unordered_map<uintptr_t, Block*> active_blocks_;
  // Freed blocks waiting for record_stream events, in the order recorded.
  std::deque<std::pair<EventId, Block*>> outstanding_events_;
  // no_caching mode: the size of each provider allocation, for the stats.
  std::unordered_map<uintptr_t, size_t> uncached_sizes_;
  // Graph pools by id, and the captures underway: (pool, capturing stream).
  std::unordered_map<MempoolId, std::unique_ptr<PrivatePool>> graph_pools_;
  std::vector<std::pair<MempoolId, StreamId>> captures_underway_;
  // Blocks with record_stream uses freed during a capture: their events are
  // recorded when no capture is underway any more.
  std::vector<Block*> deferred_event_blocks_;
  size_t allocated_ = 0, max_allocated_ = 0;
  size_t reserved_ = 0, max_reserved_ = 0;
};

}  // namespace minidl
