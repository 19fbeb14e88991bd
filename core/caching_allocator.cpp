// PyTorch's caching-allocator policy; see core/caching_allocator.h.
#include "minidl/core/caching_allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "minidl/core/check.h"

namespace minidl {

namespace {

// PyTorch's format_size for the OOM message: "20.00 MiB".
std::string format_size(size_t bytes) {
  char buf[64];
  if (bytes <= 1024) {
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  } else if (bytes <= 1048576) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(bytes) / 1024.0);
  } else if (bytes <= 1073741824) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / 1073741824.0);
  }
  return buf;
}

void* to_ptr(uintptr_t addr) { return reinterpret_cast<void*>(addr); }

}  // namespace

MempoolId new_mempool_id() {
  static std::atomic<MempoolId> next{1};  // 0 means "no pool"
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool DeviceCachingAllocator::BlockComparator::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->addr < b->addr;
}

DeviceCachingAllocator::DeviceCachingAllocator(DeviceMemoryProvider* provider,
                                               DeviceCachingAllocatorOptions options)
    : provider_(provider), options_(options) {
  MINIDL_ASSERT(provider_ != nullptr);
}

// Returns every segment to the provider. Blocks still allocated are the
// caller's leak; their segments go too, as the device memory dies with us.
DeviceCachingAllocator::~DeviceCachingAllocator() {
  std::set<Block*> all;
  for (auto* pool : {&small_blocks_, &large_blocks_})
    for (Block* b : pool->blocks) all.insert(b);
  for (auto& [id, priv] : graph_pools_)
    for (auto* pool : {&priv->small, &priv->large})
      for (Block* b : pool->blocks) all.insert(b);
  for (Block* b : deferred_event_blocks_) all.insert(b);
  for (auto& [addr, b] : active_blocks_) all.insert(b);
  for (auto& [event, b] : outstanding_events_) {
    provider_->event_destroy(event);
    all.insert(b);
  }
  for (Block* b : all)
    if (b->prev == nullptr) provider_->raw_free(to_ptr(b->addr));
  for (Block* b : all) delete b;
  for (auto& [addr, size] : uncached_sizes_) provider_->raw_free(to_ptr(addr));
}

size_t DeviceCachingAllocator::round_size(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((nbytes + kMinBlockSize - 1) / kMinBlockSize);
}

size_t DeviceCachingAllocator::get_allocation_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

void DeviceCachingAllocator::add_allocated(size_t n) {
  allocated_ += n;
  if (allocated_ > max_allocated_) max_allocated_ = allocated_;
}

void DeviceCachingAllocator::add_reserved(size_t n) {
  reserved_ += n;
  if (reserved_ > max_reserved_) max_reserved_ = reserved_;
}

void* DeviceCachingAllocator::malloc(size_t nbytes, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.no_caching) {
    if (nbytes == 0) return nullptr;  // like cudaMalloc(0)
    void* p = provider_->raw_alloc(nbytes);
    if (p == nullptr) throw_oom(nbytes);
    uncached_sizes_[reinterpret_cast<uintptr_t>(p)] = nbytes;
    add_reserved(nbytes);
    add_allocated(nbytes);
    return p;
  }

  // Blocks whose record_stream events completed become reusable first
  // (not during a capture: cudaEventQuery is forbidden then).
  const bool capturing = !captures_underway_.empty();
  if (!capturing) process_events();
  const size_t size = round_size(nbytes);
  PrivatePool* priv = capture_pool_for(stream);
  BlockPool& pool = priv != nullptr ? (size <= kSmallSize ? priv->small : priv->large)
                                    : (size <= kSmallSize ? small_blocks_ : large_blocks_);
  Block* block = get_free_block(size, stream, pool);
  if (block == nullptr) {
    // PyTorch's order: a new segment; then free one cached unsplit block big
    // enough and retry; then free every cached segment and retry; then OOM.
    // Freeing (cudaFree) synchronizes the device: never during a capture.
    const size_t alloc_size = get_allocation_size(size);
    block = alloc_block(alloc_size, stream, pool);
    if (block == nullptr && !capturing && release_available_cached_blocks(alloc_size, pool))
      block = alloc_block(alloc_size, stream, pool);
    if (block == nullptr && !capturing) {
      release_cached_blocks();
      block = alloc_block(alloc_size, stream, pool);
    }
    if (block == nullptr) throw_oom(alloc_size);  // PyTorch reports the segment size
  }

  if (should_split(block, size)) {
    // The tail stays cached in the same pool, on the same stream.
    auto* remaining = new Block{stream, block->size - size, block->addr + size, &pool};
    remaining->prev = block;
    remaining->next = block->next;
    if (remaining->next != nullptr) remaining->next->prev = remaining;
    block->next = remaining;
    block->size = size;
    pool.blocks.insert(remaining);
  }
  block->allocated = true;
  active_blocks_[block->addr] = block;
  add_allocated(block->size);
  return to_ptr(block->addr);
}

DeviceCachingAllocator::Block* DeviceCachingAllocator::get_free_block(size_t size,
                                                                      StreamId stream,
                                                                      BlockPool& pool) {
  Block key{stream, size, 0, &pool};
  auto it = pool.blocks.lower_bound(&key);
  // Same stream only: another stream's block may still be in use by kernels
  // queued there, and reusing it would need a cross-stream sync.
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.blocks.erase(it);
  return block;
}

DeviceCachingAllocator::Block* DeviceCachingAllocator::alloc_block(size_t alloc_size,
                                                                   StreamId stream,
                                                                   BlockPool& pool) {
  void* p = provider_->raw_alloc(alloc_size);
  if (p == nullptr) return nullptr;
  add_reserved(alloc_size);
  if (pool.owner != nullptr) pool.owner->reserved += alloc_size;
  return new Block{stream, alloc_size, reinterpret_cast<uintptr_t>(p), &pool};
}

DeviceCachingAllocator::PrivatePool* DeviceCachingAllocator::capture_pool_for(StreamId stream) const {
  for (const auto& [id, s] : captures_underway_)
    if (s == stream) return graph_pools_.at(id).get();
  return nullptr;
}

bool DeviceCachingAllocator::should_split(const Block* block, size_t size) const {
  const size_t remaining = block->size - size;
  if (block->pool->is_small) return remaining >= kMinBlockSize;
  return remaining > kSmallSize;
}

void DeviceCachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  if (options_.no_caching) {
    auto it = uncached_sizes_.find(addr);
    MINIDL_ASSERT(it != uncached_sizes_.end(), "free of a pointer not from this allocator");
    provider_->raw_free(ptr);
    allocated_ -= it->second;
    reserved_ -= it->second;
    uncached_sizes_.erase(it);
    return;
  }
  auto it = active_blocks_.find(addr);
  MINIDL_ASSERT(it != active_blocks_.end(), "free of a pointer not from this allocator");
  Block* block = it->second;
  active_blocks_.erase(it);
  block->allocated = false;
  allocated_ -= block->size;
  if (!block->stream_uses.empty()) {
    // Cached once the other streams' work is done; during a capture the
    // events wait (recording one would join the event to the capture).
    if (captures_underway_.empty())
      insert_events(block);
    else
      deferred_event_blocks_.push_back(block);
  } else {
    free_block(block);
  }
}

void DeviceCachingAllocator::record_stream(void* ptr, StreamId stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.no_caching) return;  // freed memory is never reused by us
  auto it = active_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  MINIDL_CHECK(it != active_blocks_.end(),
               "record_stream: pointer was not allocated by the caching allocator");
  // The allocation stream's own ordering already protects the block.
  if (stream != it->second->stream) it->second->stream_uses.insert(stream);
}

void DeviceCachingAllocator::insert_events(Block* block) {
  std::set<StreamId> streams;
  std::swap(streams, block->stream_uses);
  for (StreamId s : streams) {
    outstanding_events_.emplace_back(provider_->event_record(s), block);
    ++block->event_count;
  }
}

void DeviceCachingAllocator::process_events() {
  // Polled, never waited on: a block whose events have not completed stays
  // out of the cache until a later malloc finds them done.
  for (auto it = outstanding_events_.begin(); it != outstanding_events_.end();) {
    auto [event, block] = *it;
    if (!provider_->event_query(event)) {
      ++it;
      continue;
    }
    provider_->event_destroy(event);
    it = outstanding_events_.erase(it);
    if (--block->event_count == 0) free_block(block);
  }
}

// A freed block merges with free neighbours in its segment, then is cached.
void DeviceCachingAllocator::free_block(Block* block) {
  MINIDL_ASSERT(!block->allocated && block->event_count == 0);
  BlockPool& pool = *block->pool;
  try_merge_blocks(block, block->prev, pool);
  try_merge_blocks(block, block->next, pool);
  pool.blocks.insert(block);
  release_private_segment_if_free(block);
}

// A released graph pool gives each segment back as soon as it is whole and
// free (not during a capture: cudaFree; the capture's end sweeps), and
// disappears with its last segment.
void DeviceCachingAllocator::release_private_segment_if_free(Block* block) {
  PrivatePool* priv = block->pool->owner;
  if (priv == nullptr || priv->use_count > 0 || block->prev != nullptr || block->next != nullptr) return;
  if (!captures_underway_.empty()) return;
  priv->reserved -= block->size;
  release_block(block);
  if (priv->reserved == 0) graph_pools_.erase(priv->id);
}

// Every whole free segment of the released pools, then the empty pools.
void DeviceCachingAllocator::release_free_private_segments() {
  if (!captures_underway_.empty()) return;
  for (auto it = graph_pools_.begin(); it != graph_pools_.end();) {
    PrivatePool* priv = it->second.get();
    if (priv->use_count == 0) {
      std::vector<Block*> whole;
      for (auto* pool : {&priv->small, &priv->large})
        for (Block* b : pool->blocks)
          if (b->prev == nullptr && b->next == nullptr) whole.push_back(b);
      for (Block* b : whole) {
        priv->reserved -= b->size;
        release_block(b);
      }
    }
    if (priv->use_count == 0 && priv->reserved == 0)
      it = graph_pools_.erase(it);
    else
      ++it;
  }
}

void DeviceCachingAllocator::try_merge_blocks(Block* dst, Block* src, BlockPool& pool) {
  if (src == nullptr || src->allocated || src->event_count > 0 || !src->stream_uses.empty())
    return;
  if (dst->prev == src) {  // src is before dst: dst starts where src did
    dst->addr = src->addr;
    dst->prev = src->prev;
    if (dst->prev != nullptr) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next != nullptr) dst->next->prev = dst;
  }
  dst->size += src->size;
  pool.blocks.erase(src);
  delete src;
}

// Frees the smallest cached whole segment (any stream) of at least
// `alloc_size` bytes, so the retry of a fresh segment can fit.
bool DeviceCachingAllocator::release_available_cached_blocks(size_t alloc_size, BlockPool& pool) {
  Block* best = nullptr;
  for (Block* b : pool.blocks) {
    if (b->prev != nullptr || b->next != nullptr || b->size < alloc_size) continue;
    if (best == nullptr || b->size < best->size) best = b;
  }
  if (best == nullptr) return false;
  release_block(best);
  return true;
}

// Frees every cached whole segment of both pools (empty_cache).
void DeviceCachingAllocator::release_cached_blocks() {
  for (auto* pool : {&small_blocks_, &large_blocks_}) {
    std::vector<Block*> whole;
    for (Block* b : pool->blocks)
      if (b->prev == nullptr && b->next == nullptr) whole.push_back(b);
    for (Block* b : whole) release_block(b);
  }
}

void DeviceCachingAllocator::release_block(Block* block) {
  provider_->raw_free(to_ptr(block->addr));
  reserved_ -= block->size;
  block->pool->blocks.erase(block);
  delete block;
}

void DeviceCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  MINIDL_CHECK(captures_underway_.empty(),
               "empty_cache: not allowed while a CUDA graph is being captured (cudaFree synchronizes the device)");
  process_events();
  release_cached_blocks();
  release_free_private_segments();
}

// PyTorch's message (c10/cuda/CUDACachingAllocator.cpp, malloc's OOM path),
// less the total capacity and per-process use, which the provider does not know.
void DeviceCachingAllocator::throw_oom(size_t nbytes) {
  const size_t free_now = provider_->free_bytes();
  MINIDL_FAIL("CUDA out of memory. Tried to allocate ", format_size(nbytes), ". GPU has ",
              format_size(free_now), " free. Of the allocated memory ", format_size(allocated_),
              " is allocated by minidl, and ", format_size(reserved_ - allocated_),
              " is reserved by minidl but unallocated. If reserved but unallocated memory is "
              "large, the cache is fragmented: empty_cache() returns it to the device.");
}

void DeviceCachingAllocator::begin_allocate_to_pool(MempoolId id, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  MINIDL_CHECK(!options_.no_caching,
               "CUDA graphs need the caching allocator's private pools: unset PYTORCH_NO_CUDA_MEMORY_CACHING");
  MINIDL_CHECK(id != 0, "begin_allocate_to_pool: 0 is not a pool id (use new_mempool_id())");
  for (const auto& [other, s] : captures_underway_)
    MINIDL_CHECK(s != stream && other != id,
                 "begin_allocate_to_pool: ", s == stream ? "this stream" : "this pool",
                 " is already capturing into a pool (a capture cannot nest)");
  auto it = graph_pools_.find(id);
  if (it == graph_pools_.end()) {
    graph_pools_.emplace(id, std::make_unique<PrivatePool>(id));
  } else {
    // A shared pool (graph_pool_handle): held once more. One already
    // released by all its graphs cannot be revived (its segments are going).
    MINIDL_CHECK(it->second->use_count > 0, "begin_allocate_to_pool: pool ", id, " was already released");
    ++it->second->use_count;
  }
  captures_underway_.emplace_back(id, stream);
}

void DeviceCachingAllocator::end_allocate_to_pool(MempoolId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(captures_underway_.begin(), captures_underway_.end(),
                         [&](const auto& c) { return c.first == id; });
  MINIDL_CHECK(it != captures_underway_.end(), "end_allocate_to_pool: pool ", id, " has no capture underway");
  captures_underway_.erase(it);
  if (captures_underway_.empty()) {
    for (Block* b : deferred_event_blocks_) insert_events(b);
    deferred_event_blocks_.clear();
    release_free_private_segments();
  }
}

void DeviceCachingAllocator::release_pool(MempoolId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = graph_pools_.find(id);
  MINIDL_CHECK(it != graph_pools_.end() && it->second->use_count > 0, "release_pool: no live pool ", id);
  // Whole free segments go now (or when the captures underway end); the
  // others when their last block is freed.
  if (--it->second->use_count == 0) release_free_private_segments();
}

size_t DeviceCachingAllocator::pool_reserved(MempoolId id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = graph_pools_.find(id);
  return it == graph_pools_.end() ? 0 : it->second->reserved;
}

bool DeviceCachingAllocator::capture_underway() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !captures_underway_.empty();
}

size_t DeviceCachingAllocator::memory_allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

size_t DeviceCachingAllocator::max_memory_allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return max_allocated_;
}

size_t DeviceCachingAllocator::memory_reserved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserved_;
}

size_t DeviceCachingAllocator::max_memory_reserved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return max_reserved_;
}

// PyTorch's reset: the peaks restart from the current values.
void DeviceCachingAllocator::reset_peak_memory_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  max_allocated_ = allocated_;
  max_reserved_ = reserved_;
}

}  // namespace minidl
