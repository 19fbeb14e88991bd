// The parts of core/cuda_graph.h that need no CUDA call of their own, in
// every build: GraphCapture (over CUDAGraph and CaptureStreamGuard, which
// core/cuda/graph.cpp implements, or core/cuda_unavailable.cpp without CUDA)
// and graph_pool_handle.
#include "minidl/core/cuda_graph.h"

#include "minidl/core/caching_allocator.h"

namespace minidl::cuda {

uint64_t graph_pool_handle() { return new_mempool_id(); }

GraphCapture::GraphCapture(CUDAGraph& graph, uint64_t pool, CaptureErrorMode mode) : graph_(graph) {
  graph_.capture_begin(pool, mode);  // on the capture stream, made current by stream_
}

// Still capturing: end() was not reached (an exception in the region) or
// refused to end (another current stream): abandon the capture.
GraphCapture::~GraphCapture() {
  if (graph_.is_capturing()) graph_.reset();
}

void GraphCapture::end() { graph_.capture_end(); }

}  // namespace minidl::cuda
