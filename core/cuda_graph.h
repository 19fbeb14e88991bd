// CUDA graphs (torch.cuda.CUDAGraph, torch.cuda.graph, graph_pool_handle):
// a region of GPU work recorded once and replayed with one launch, which
// removes the per-kernel launch cost that dominates small-batch steps. In
// every build and without CUDA headers, like core/cuda.h; without the CUDA
// backend every capture throws minidl::Error saying why.
//
// PyTorch's rules, which the implementation (core/cuda/graph.cpp) enforces
// where it can:
//   - capture on a side stream, never the legacy stream 0 nor minidl's
//     default stream (other threads' work there would join the capture);
//     CaptureStreamGuard / GraphCapture switch to the device's capture stream;
//   - warm up first, on that same stream: lazy one-time work (cuBLAS
//     workspaces per stream, cuDNN benchmark searches, optimizer state,
//     momentum buffers) must not happen inside the capture; the backend throws
//     a clear error where it would;
//   - nothing in the region may synchronize with the host (item(), a copy to
//     the CPU, cuda::synchronize) or free device memory: capture_end reports
//     cudaStreamEndCapture's error otherwise;
//   - every allocation during the capture comes from the graph's private pool
//     (core/caching_allocator.h), kept until reset()/destruction, so replays
//     find their tensors where the capture put them;
//   - inputs are static: copy each batch into the tensors the capture read
//     (copy_) before replay(); outputs are the capture's tensors, overwritten
//     by every replay;
//   - kernel arguments are baked in: a per-step scalar (the lr, Adam's step)
//     must live in device memory (optim's `capturable` options).
//
//   cuda::CUDAGraph g;
//   { cuda::CaptureStreamGuard side; for (int i = 0; i < 3; ++i) step(); }  // warm-up
//   { cuda::GraphCapture capture(g); step(); capture.end(); }
//   for (...) { static_x.copy_(batch); g.replay(); }
//
// Ran on an H100 (2026-11-27): tests/test_cuda_graph.cpp (captured SGD and
// Adam steps equal the eager ones) and train_cifar10 --cuda-graph (the eager
// run's loss, 251 replays).
#pragma once

#include <cstdint>
#include <memory>

namespace minidl::cuda {

// An id for several graphs to share one private pool (graphs replayed in the
// order they were captured may share memory): pass it to capture_begin.
uint64_t graph_pool_handle();

// Whether the calling thread's current CUDA stream is capturing (false in a
// build or on a machine without CUDA). Lazy state creation checks it.
bool is_current_stream_capturing();

// cudaStreamCaptureMode. Global (PyTorch's default): while capturing, any
// thread's potentially unsafe CUDA call (cudaMalloc outside the allocator,
// a synchronization) fails; ThreadLocal: only this thread's; Relaxed: none.
enum class CaptureErrorMode { Global, ThreadLocal, Relaxed };

class CUDAGraph {
 public:
  CUDAGraph();
  ~CUDAGraph();  // reset(); never throws
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  // Starts capturing the current stream of the current device. pool: 0 for a
  // private pool of its own, or graph_pool_handle()'s id to share one.
  void capture_begin(uint64_t pool = 0, CaptureErrorMode mode = CaptureErrorMode::Global);
  // Ends the capture (on the stream it began on) and instantiates the graph;
  // throws with cudaStreamEndCapture's error if something in the region
  // broke the capture.
  void capture_end();
  // Launches the captured work on the current stream (asynchronous, as a kernel).
  void replay();
  // Frees the graph and gives its pool back (its memory is returned to the
  // device once no tensor uses it). A capture underway is abandoned.
  void reset() noexcept;

  bool has_graph() const;     // capture_end succeeded and no reset since
  bool is_capturing() const;  // between capture_begin and capture_end
  uint64_t pool() const;      // the pool id (0 before the first capture_begin)

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Makes the device's capture stream (one per device, non-blocking, minidl's
// own) current for the scope: PyTorch's `with torch.cuda.stream(s)`. On entry
// it waits for the work queued so far on the previous current stream; on
// exit the previous stream waits for the work queued on it. Use it for the
// warm-up steps before a capture.
class CaptureStreamGuard {
 public:
  explicit CaptureStreamGuard(int device = -1);
  ~CaptureStreamGuard();
  CaptureStreamGuard(const CaptureStreamGuard&) = delete;
  CaptureStreamGuard& operator=(const CaptureStreamGuard&) = delete;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// torch.cuda.graph(g): the capture stream made current, then
// g.capture_begin(pool, mode). end() calls capture_end (and throws as it
// does); leaving the scope without end() (an exception in the region)
// abandons the capture, leaving the graph empty.
class GraphCapture {
 public:
  explicit GraphCapture(CUDAGraph& graph, uint64_t pool = 0, CaptureErrorMode mode = CaptureErrorMode::Global);
  ~GraphCapture();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;
  void end();

 private:
  CUDAGraph& graph_;
  CaptureStreamGuard stream_;
};

}  // namespace minidl::cuda
