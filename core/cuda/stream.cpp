// Streams (PyTorch's c10/cuda/CUDAStream.cpp, simplified to one priority):
// per device a default stream and a pool of 32, all non-blocking, created
// on first use and never destroyed (tensors freed at exit may still name
// them); per thread and device the current stream, the default unless set.
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "minidl/core/cuda/graph.h"
#include "minidl/core/cuda/runtime.h"

namespace minidl::cuda {

namespace {

constexpr int kPoolSize = 32;

struct DeviceStreams {
  std::once_flag default_once, pool_once;
  cudaStream_t default_stream = nullptr;
  std::array<cudaStream_t, kPoolSize> pool{};
  std::atomic<unsigned> next{0};
};

cudaStream_t make_stream(int index) {
  DeviceGuard guard(index);
  cudaStream_t s = nullptr;
  MINIDL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

// One entry per device, made once (device_count() is fixed for the process).
// Never destroyed: see the file comment.
DeviceStreams& streams_of(int index) {
  static std::vector<DeviceStreams>* all = new std::vector<DeviceStreams>(static_cast<size_t>(device_count()));
  return (*all)[static_cast<size_t>(index)];
}

int checked_index(int index, const char* op) {
  MINIDL_CHECK(is_available(), op, ": CUDA is not available: ", unavailable_reason());
  if (index < 0) return current_device();
  MINIDL_CHECK(index < device_count(), op, ": invalid device ordinal ", index, " (device_count() is ",
               device_count(), ")");
  return index;
}

cudaStream_t default_stream(int index) {
  DeviceStreams& d = streams_of(index);
  std::call_once(d.default_once, [&] { d.default_stream = make_stream(index); });
  return d.default_stream;
}

// nullptr: the device's default stream. Sized on first use by this thread.
std::vector<cudaStream_t>& thread_current() {
  thread_local std::vector<cudaStream_t> current(static_cast<size_t>(device_count()), nullptr);
  return current;
}

}  // namespace

cudaStream_t device_default_stream(int index) {
  return default_stream(checked_index(index, "device_default_stream"));
}

cudaStream_t current_stream(int index) {
  index = checked_index(index, "current_stream");
  cudaStream_t s = thread_current()[static_cast<size_t>(index)];
  return s != nullptr ? s : default_stream(index);
}

void set_current_stream(int index, cudaStream_t stream) {
  index = checked_index(index, "set_current_stream");
  MINIDL_CHECK(stream != nullptr,
               "set_current_stream: the legacy default stream (0) cannot be current: it synchronizes with every "
               "blocking stream; use current_stream() or stream_from_pool()");
  int stream_device = -1;
  MINIDL_CUDA_CHECK(cudaStreamGetDevice(stream, &stream_device));
  MINIDL_CHECK(stream_device == index, "set_current_stream: the stream belongs to cuda:", stream_device,
               ", not cuda:", index);
  thread_current()[static_cast<size_t>(index)] = stream;
}

cudaStream_t stream_from_pool(int index) {
  index = checked_index(index, "stream_from_pool");
  DeviceStreams& d = streams_of(index);
  std::call_once(d.pool_once, [&] {
    for (cudaStream_t& s : d.pool) s = make_stream(index);
  });
  return d.pool[d.next.fetch_add(1, std::memory_order_relaxed) % kPoolSize];
}

StreamGuard::StreamGuard(int index, cudaStream_t stream)
    : index_(checked_index(index, "StreamGuard")), previous_(current_stream(index_)) {
  set_current_stream(index_, stream);
}

StreamGuard::~StreamGuard() {
  // previous_ was current before, so it is valid for index_: no check can fail.
  thread_current()[static_cast<size_t>(index_)] = previous_;
}

}  // namespace minidl::cuda
