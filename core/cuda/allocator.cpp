// The CUDA allocators: PyTorch's caching policy (core/caching_allocator.h)
// over cudaMalloc/cudaFree, one DeviceCachingAllocator per device, blocks
// keyed by the allocating thread's current stream; and pinned host memory
// (cudaHostAlloc) for asynchronous copies. Installed by register_cuda_backend().
// Nothing here is ever destroyed: tensors in static storage are freed after
// main returns, when the per-device state must still be there.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "minidl/core/allocator.h"
#include "minidl/core/caching_allocator.h"
#include "minidl/core/cuda/graph.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/tensor.h"
#include "minidl/core/tensor_impl.h"

namespace minidl::cuda {

namespace {

// The runtime calls behind the policy, for device `index_` (the caller has
// made it current: the adapter below holds a DeviceGuard around every call).
class CudaMemoryProvider final : public DeviceMemoryProvider {
 public:
  void* raw_alloc(size_t nbytes) override {
    void* p = nullptr;
    // A new segment for a graph's private pool is allocated during the
    // capture: cudaMalloc is fine then (the graph gets new addresses; replays
    // do not allocate again, as PyTorch's cudaMallocMaybeCapturing says) but
    // counts as "potentially unsafe" in the Global and ThreadLocal capture
    // modes, so this thread is relaxed for the call.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    MINIDL_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t err = cudaMalloc(&p, nbytes);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);  // restores the thread's mode
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it; the policy frees its cache and retries
      return nullptr;
    }
    MINIDL_CUDA_CHECK_OP(err, "the CUDA caching allocator");
    return p;
  }
  void raw_free(void* ptr) override {
    const cudaError_t err = cudaFree(ptr);
    if (err == cudaErrorCudartUnloading) return;  // at exit: the driver frees everything
    MINIDL_CUDA_CHECK_OP(err, "the CUDA caching allocator");
  }
  size_t free_bytes() override {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();  // for a message only
    return free;
  }
  EventId event_record(StreamId stream) override {
    cudaEvent_t e = nullptr;
    MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    const cudaError_t err = cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) {
      (void)cudaEventDestroy(e);
      MINIDL_CUDA_CHECK(err);
    }
    return reinterpret_cast<EventId>(e);
  }
  bool event_query(EventId event) override {
    const cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    MINIDL_CUDA_CHECK(err);
    return true;
  }
  void event_destroy(EventId event) override { (void)cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)); }
};

// PYTORCH_NO_CUDA_MEMORY_CACHING set (to anything but 0): no caching, so
// compute-sanitizer sees every buffer's bounds.
bool no_caching_from_env() {
  const char* env = std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
  return env != nullptr && std::strcmp(env, "0") != 0;
}

struct DeviceState {
  std::once_flag once;
  CudaMemoryProvider provider;
  std::unique_ptr<DeviceCachingAllocator> owner;
  std::atomic<DeviceCachingAllocator*> ready{nullptr};  // owner.get(), published once made
};

std::vector<DeviceState>& device_states() {
  static auto* states = new std::vector<DeviceState>(static_cast<size_t>(device_count()));
  return *states;
}

DeviceCachingAllocator& caching_allocator(int index) {
  DeviceState& d = device_states().at(static_cast<size_t>(index));
  std::call_once(d.once, [&] {
    d.owner = std::make_unique<DeviceCachingAllocator>(
        &d.provider, DeviceCachingAllocatorOptions{.no_caching = no_caching_from_env()});
    d.ready.store(d.owner.get(), std::memory_order_release);
  });
  return *d.owner;
}

// The device's allocator if a block was ever allocated there, else nullptr
// (the statistics calls must not create one).
DeviceCachingAllocator* existing_allocator(int index) {
  if (!is_available()) return nullptr;
  if (index < 0) index = current_device();
  MINIDL_CHECK(index < device_count(), "invalid device ordinal ", index, " (device_count() is ", device_count(), ")");
  return device_states()[static_cast<size_t>(index)].ready.load(std::memory_order_acquire);
}

// DeviceGuard for the free path, which runs in destructors, also after main
// returns when the CUDA runtime may be unloading: errors are ignored (the
// block's bookkeeping needs no device; a cudaFree then fails harmlessly).
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int index) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
      return;
    }
    if (previous_ != index && cudaSetDevice(index) != cudaSuccess) (void)cudaGetLastError();
  }
  ~QuietDeviceGuard() {
    if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    MINIDL_CHECK(device.is_cuda(), "CUDA allocator: expected a CUDA device, got ", device.str());
    if (nbytes == 0) return nullptr;  // as PyTorch: no block for an empty tensor
    DeviceGuard guard(device.index);
    void* p = caching_allocator(device.index).malloc(nbytes, reinterpret_cast<StreamId>(current_stream(device.index)));
    std::lock_guard<std::mutex> lock(mu_);
    device_of_[p] = device.index;
    return p;
  }
  void deallocate(void* ptr) noexcept override {
    if (ptr == nullptr) return;
    int index = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = device_of_.find(ptr);
      if (it == device_of_.end()) return report("freeing a pointer the CUDA allocator did not allocate");
      index = it->second;
      device_of_.erase(it);
    }
    try {
      QuietDeviceGuard guard(index);
      caching_allocator(index).free(ptr);
    } catch (const std::exception& e) {
      report(e.what());  // a destructor path: tell, never throw
    }
  }
  // -1 when `ptr` is not a block of this allocator.
  int device_of(void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = device_of_.find(ptr);
    return it == device_of_.end() ? -1 : it->second;
  }

 private:
  static void report(const char* what) noexcept { std::fprintf(stderr, "minidl: CUDA allocator: %s\n", what); }

  std::mutex mu_;
  std::unordered_map<void*, int> device_of_;
};

CudaAllocator& cuda_allocator() {
  static auto* a = new CudaAllocator;
  return *a;
}

// Page-locked host memory (cudaHostAlloc), not cached (PyTorch's
// CachingHostAllocator keeps freed blocks for reuse; not done here yet). A
// block used by an asynchronous copy carries that copy's events
// (record_pinned_host_use); freeing it waits for them first, so the copy
// never reads or writes memory given back to the driver.
class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    MINIDL_CHECK(device.is_cpu(), "pinned host allocator: expected the CPU, got ", device.str());
    if (nbytes == 0) return nullptr;
    void* p = nullptr;
    MINIDL_CUDA_CHECK_OP(cudaHostAlloc(&p, nbytes, cudaHostAllocDefault), "pin_memory");
    return p;
  }
  void deallocate(void* ptr) noexcept override {
    if (ptr == nullptr) return;
    std::vector<cudaEvent_t> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = uses_.find(ptr);
      if (it != uses_.end()) {
        events = std::move(it->second);
        uses_.erase(it);
      }
    }
    for (cudaEvent_t e : events) {
      if (cudaEventSynchronize(e) != cudaSuccess) (void)cudaGetLastError();
      (void)cudaEventDestroy(e);
    }
    const cudaError_t err = cudaFreeHost(ptr);
    if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
      (void)cudaGetLastError();
      std::fprintf(stderr, "minidl: cudaFreeHost failed: %s\n", cudaGetErrorString(err));
    }
  }
  void record_use(void* ptr, cudaStream_t stream) {
    cudaEvent_t e = nullptr;
    MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    const cudaError_t err = cudaEventRecord(e, stream);
    if (err != cudaSuccess) {
      (void)cudaEventDestroy(e);
      MINIDL_CUDA_CHECK(err);
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto& events = uses_[ptr];
    // Completed events of earlier copies go now: a long-lived buffer reused
    // every step keeps one or two, not one per step.
    std::erase_if(events, [](cudaEvent_t old) {
      if (cudaEventQuery(old) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
      (void)cudaEventDestroy(old);
      return true;
    });
    events.push_back(e);
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, std::vector<cudaEvent_t>> uses_;  // block -> events of its async copies
};

PinnedHostAllocator& pinned_allocator() {
  static auto* a = new PinnedHostAllocator;
  return *a;
}

}  // namespace

void register_cuda_backend() {
  set_allocator(DeviceType::CUDA, &cuda_allocator());
  set_pinned_host_allocator(&pinned_allocator());
}

void record_pinned_host_use(const Tensor& host, cudaStream_t stream) {
  if (!host.defined() || !host.is_pinned()) return;
  pinned_allocator().record_use(host.impl()->storage->data(), stream);
}

void record_stream(const Tensor& t, cudaStream_t stream) {
  MINIDL_CHECK(t.defined() && t.is_cuda(), "record_stream: expected a CUDA tensor");
  void* ptr = t.impl()->storage->data();
  const int index = cuda_allocator().device_of(ptr);
  if (index < 0) return;  // an empty tensor (no block), or memory from elsewhere
  DeviceGuard guard(index);
  caching_allocator(index).record_stream(ptr, reinterpret_cast<StreamId>(stream));
}

void begin_allocate_to_pool(int index, MempoolId id, cudaStream_t stream) {
  DeviceGuard guard(index);
  caching_allocator(index).begin_allocate_to_pool(id, reinterpret_cast<StreamId>(stream));
}
void end_allocate_to_pool(int index, MempoolId id) {
  DeviceGuard guard(index);
  caching_allocator(index).end_allocate_to_pool(id);
}
void release_pool(int index, MempoolId id) {
  DeviceGuard guard(index);
  caching_allocator(index).release_pool(id);
}

size_t memory_allocated(int index) {
  const DeviceCachingAllocator* a = existing_allocator(index);
  return a ? a->memory_allocated() : 0;
}
size_t max_memory_allocated(int index) {
  const DeviceCachingAllocator* a = existing_allocator(index);
  return a ? a->max_memory_allocated() : 0;
}
size_t memory_reserved(int index) {
  const DeviceCachingAllocator* a = existing_allocator(index);
  return a ? a->memory_reserved() : 0;
}
size_t max_memory_reserved(int index) {
  const DeviceCachingAllocator* a = existing_allocator(index);
  return a ? a->max_memory_reserved() : 0;
}
void reset_peak_memory_stats(int index) {
  if (DeviceCachingAllocator* a = existing_allocator(index)) a->reset_peak_memory_stats();
}
void empty_cache() {
  for (int i = 0; i < device_count(); ++i) {
    if (DeviceCachingAllocator* a = existing_allocator(i)) {
      DeviceGuard guard(i);
      a->empty_cache();
    }
  }
}

}  // namespace minidl::cuda
