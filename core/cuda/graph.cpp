// CUDAGraph and CaptureStreamGuard (core/cuda_graph.h) over the CUDA runtime,
// after PyTorch's aten/src/ATen/cuda/CUDAGraph.cpp: capture_begin routes the
// capturing stream's allocations into a private pool and calls
// cudaStreamBeginCapture; capture_end ends it, instantiates the graph and
// keeps the pool until reset. Ran on an H100 (2026-11-27): tests/test_cuda_graph.cpp
// and train_cifar10 --cuda-graph (scripts/gpu-check.sh run).
#include "minidl/core/cuda/graph.h"

#include <cstdio>
#include <mutex>
#include <vector>

namespace minidl::cuda {

namespace {

cudaStreamCaptureMode to_cuda(CaptureErrorMode mode) {
  switch (mode) {
    case CaptureErrorMode::Global: return cudaStreamCaptureModeGlobal;
    case CaptureErrorMode::ThreadLocal: return cudaStreamCaptureModeThreadLocal;
    case CaptureErrorMode::Relaxed: return cudaStreamCaptureModeRelaxed;
  }
  return cudaStreamCaptureModeGlobal;
}

bool is_legacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread; }

// The graph this thread is capturing, if any: captures cannot nest.
thread_local const CUDAGraph::Impl* t_capturing = nullptr;

}  // namespace

cudaStream_t capture_stream(int index) {
  struct PerDevice {
    std::once_flag once;
    cudaStream_t stream = nullptr;
  };
  // Never destroyed, like the other runtime streams (core/cuda/stream.cpp).
  static auto* all = new std::vector<PerDevice>(static_cast<size_t>(device_count()));
  MINIDL_CHECK(index >= 0 && index < device_count(), "capture_stream: invalid device ordinal ", index);
  PerDevice& d = (*all)[static_cast<size_t>(index)];
  std::call_once(d.once, [&] {
    DeviceGuard guard(index);
    MINIDL_CUDA_CHECK(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
  });
  return d.stream;
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MINIDL_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

void check_not_capturing(cudaStream_t stream, const char* what, const char* why) {
  MINIDL_CHECK(!stream_is_capturing(stream), what, " cannot be captured in a CUDA graph: ", why);
}

bool is_current_stream_capturing() {
  if (!is_available()) return false;
  return stream_is_capturing(current_stream());
}

// ---- CUDAGraph ----------------------------------------------------------------

struct CUDAGraph::Impl {
  int device = -1;
  cudaStream_t stream = nullptr;  // the capturing stream
  cudaGraphExec_t exec = nullptr;
  MempoolId pool = 0;
  bool capturing = false;
  bool holds_pool = false;  // begin_allocate_to_pool was called and release_pool not yet

  // Ends a capture that failed or was abandoned; never throws.
  void abandon_capture() noexcept {
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(stream, &g) == cudaSuccess && g != nullptr) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    capturing = false;
    if (t_capturing == this) t_capturing = nullptr;
    try {
      end_allocate_to_pool(device, pool);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "minidl: CUDAGraph: %s\n", e.what());
    }
    give_back_pool();
  }
  void give_back_pool() noexcept {
    if (!holds_pool) return;
    holds_pool = false;
    try {
      release_pool(device, pool);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "minidl: CUDAGraph: %s\n", e.what());
    }
  }
};

CUDAGraph::CUDAGraph() : impl_(std::make_unique<Impl>()) {}
CUDAGraph::~CUDAGraph() { reset(); }

bool CUDAGraph::has_graph() const { return impl_->exec != nullptr; }
bool CUDAGraph::is_capturing() const { return impl_->capturing; }
uint64_t CUDAGraph::pool() const { return impl_->pool; }

void CUDAGraph::capture_begin(uint64_t pool, CaptureErrorMode mode) {
  Impl& g = *impl_;
  MINIDL_CHECK(is_available(), "CUDAGraph::capture_begin: CUDA is not available: ", unavailable_reason());
  MINIDL_CHECK(!g.capturing, "CUDAGraph::capture_begin: this graph is already capturing");
  MINIDL_CHECK(g.exec == nullptr, "CUDAGraph::capture_begin: this CUDAGraph instance already owns a captured graph; "
                                  "call reset() or use a new instance to capture another");
  MINIDL_CHECK(t_capturing == nullptr,
               "CUDAGraph::capture_begin: another graph is being captured on this thread (captures cannot nest)");
  const int device = current_device();
  const cudaStream_t stream = current_stream(device);
  MINIDL_CHECK(!is_legacy(stream), "CUDAGraph::capture_begin: the legacy default stream cannot be captured");
  MINIDL_CHECK(stream != device_default_stream(device), "CUDAGraph::capture_begin: the current stream is minidl's "
               "default stream of cuda:", device, "; capture on a side stream (cuda::GraphCapture or "
               "cuda::CaptureStreamGuard): other threads' work on the default stream would join the capture");
  MINIDL_CHECK(!stream_is_capturing(stream), "CUDAGraph::capture_begin: the current stream is already capturing");
  const MempoolId id = pool != 0 ? pool : new_mempool_id();
  // The pool first: allocations the runtime makes while capturing must go there.
  begin_allocate_to_pool(device, id, stream);
  const cudaError_t err = cudaStreamBeginCapture(stream, to_cuda(mode));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    end_allocate_to_pool(device, id);
    release_pool(device, id);
    MINIDL_FAIL("CUDAGraph::capture_begin: cudaStreamBeginCapture failed: ", cudaGetErrorName(err), " (",
                cudaGetErrorString(err), ")");
  }
  g.device = device;
  g.stream = stream;
  g.pool = id;
  g.capturing = true;
  g.holds_pool = true;
  t_capturing = &g;
}

void CUDAGraph::capture_end() {
  Impl& g = *impl_;
  MINIDL_CHECK(g.capturing, "CUDAGraph::capture_end: called without capture_begin");
  DeviceGuard guard(g.device);
  MINIDL_CHECK(current_stream(g.device) == g.stream,
               "CUDAGraph::capture_end: capture must end on the same stream it began on");
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(g.stream, &graph);
  (void)cudaGetLastError();
  g.capturing = false;
  t_capturing = nullptr;
  end_allocate_to_pool(g.device, g.pool);
  if (err != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    g.give_back_pool();
    MINIDL_FAIL("CUDAGraph::capture_end: the capture failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                "). The captured region did something a CUDA graph cannot hold: a host synchronization (item(), "
                "a copy to the CPU, cuda::synchronize), a cudaFree or empty_cache, an event or stream query, or "
                "work of another thread joining the capture (CaptureErrorMode::Global forbids such calls on "
                "every thread)");
  }
  const cudaError_t inst = cudaGraphInstantiateWithFlags(&g.exec, graph, 0);
  (void)cudaGraphDestroy(graph);  // the executable graph holds what it needs
  if (inst != cudaSuccess) {
    (void)cudaGetLastError();
    g.exec = nullptr;
    g.give_back_pool();
    MINIDL_FAIL("CUDAGraph::capture_end: cudaGraphInstantiate failed: ", cudaGetErrorName(inst), " (",
                cudaGetErrorString(inst), ")");
  }
}

void CUDAGraph::replay() {
  Impl& g = *impl_;
  MINIDL_CHECK(g.exec != nullptr, "CUDAGraph::replay: called without a preceding successful capture "
                                  "(capture_begin, then capture_end)");
  DeviceGuard guard(g.device);
  MINIDL_CUDA_CHECK_OP(cudaGraphLaunch(g.exec, current_stream(g.device)), "CUDAGraph::replay");
}

void CUDAGraph::reset() noexcept {
  Impl& g = *impl_;
  if (g.capturing) g.abandon_capture();
  if (g.exec != nullptr) {
    (void)cudaGraphExecDestroy(g.exec);
    (void)cudaGetLastError();
    g.exec = nullptr;
  }
  // cudaFree of the pool's segments synchronizes the device, so a replay
  // still running is finished before its memory goes.
  g.give_back_pool();
}

// ---- CaptureStreamGuard ---------------------------------------------------------

struct CaptureStreamGuard::Impl {
  int device = -1;
  cudaStream_t previous = nullptr;
  cudaStream_t side = nullptr;
};

namespace {

// Later work on `waiter` waits for the work queued so far on `waited`.
void stream_wait(cudaStream_t waiter, cudaStream_t waited) {
  cudaEvent_t e = nullptr;
  MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(e, waited);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(waiter, e, 0);
  (void)cudaEventDestroy(e);  // legal right after the wait is queued
  MINIDL_CUDA_CHECK(err);
}

}  // namespace

CaptureStreamGuard::CaptureStreamGuard(int device) : impl_(std::make_unique<Impl>()) {
  MINIDL_CHECK(is_available(), "CaptureStreamGuard: CUDA is not available: ", unavailable_reason());
  Impl& s = *impl_;
  s.device = device < 0 ? current_device() : device;
  DeviceGuard guard(s.device);
  s.previous = current_stream(s.device);
  s.side = capture_stream(s.device);
  if (s.side != s.previous) stream_wait(s.side, s.previous);
  set_current_stream(s.device, s.side);
}

CaptureStreamGuard::~CaptureStreamGuard() {
  Impl& s = *impl_;
  try {
    DeviceGuard guard(s.device);
    // A capture left open on the side stream (an exception between a bare
    // capture_begin and capture_end) must not spread to the previous stream.
    if (s.side != s.previous && !stream_is_capturing(s.side)) stream_wait(s.previous, s.side);
    set_current_stream(s.device, s.previous);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minidl: CaptureStreamGuard: %s\n", e.what());  // a destructor: tell, never throw
  }
}

}  // namespace minidl::cuda
