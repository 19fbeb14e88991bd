// The backend side of CUDA graphs (core/cuda_graph.h is the user's side):
// the caching allocator's private-pool hooks per device, the streams a
// capture must and must not use, and the check that backend code calls
// before work that cannot be captured. Backend-only, like core/cuda/runtime.h
// (declared here rather than there so that runtime.h's many dependents do not
// rebuild). Ran on an H100 (tests/test_cuda_graph, 2026-11-27).
#pragma once

#include <cuda_runtime_api.h>

#include "minidl/core/caching_allocator.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/cuda_graph.h"

namespace minidl::cuda {

// core/cuda/allocator.cpp: DeviceCachingAllocator's pool calls on device `index`.
void begin_allocate_to_pool(int index, MempoolId id, cudaStream_t stream);
void end_allocate_to_pool(int index, MempoolId id);
void release_pool(int index, MempoolId id);

// core/cuda/stream.cpp: minidl's default stream of device `index` (the
// current stream of every thread that set none).
cudaStream_t device_default_stream(int index);
// core/cuda/graph.cpp: the device's capture stream (CaptureStreamGuard's).
cudaStream_t capture_stream(int index);

// Whether `stream` is being captured into a graph (cudaStreamIsCapturing,
// which is legal during a capture).
bool stream_is_capturing(cudaStream_t stream);
// Throws minidl::Error "<what> cannot be captured in a CUDA graph: <why>" when
// `stream` is capturing; call it before doing the work, so the capture fails
// with this message instead of an invalidated capture.
void check_not_capturing(cudaStream_t stream, const char* what, const char* why);

}  // namespace minidl::cuda
