// Host bytes (pad's and upsample's index maps) uploaded into a temporary device
// buffer on an op's stream, safely whatever the host vector's lifetime.
// CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "minidl/core/cuda/graph.h"
#include "minidl/ops/cuda/launch.cuh"

namespace minidl::cuda_kernels {

// A temporary device buffer holding a copy of `bytes` of host memory, copied
// on ctx.stream. cudaMemcpyAsync from pageable memory "might be synchronous"
// only (CUDA Runtime API, "API synchronization behavior"), so the caller's
// vector may not be freed when it returns: the bytes go to a heap copy that a
// host callback on the same stream frees once the copy has run. (The callback
// holds the stream for a moment; a caching pinned host allocator would avoid
// that: not written yet.) Keep the returned Tensor alive until the last
// launch reading it is enqueued, as for temp_buffer.
inline Tensor upload_to_device(const void* host, int64_t bytes, const LaunchContext& ctx, const char* op) {
  // A graph would copy from the freed heap copy at every replay and run the
  // freeing callback each time: refused until these tables are graph-safe.
  cuda::check_not_capturing(ctx.stream, op,
                            "its index table is uploaded from pageable host memory at each call (ops/cuda/upload.cuh)");
  Tensor dev = temp_buffer(bytes, ctx.device);
  if (bytes <= 0) return dev;
  using Bytes = std::vector<unsigned char>;
  const auto* first = static_cast<const unsigned char*>(host);
  auto* copy = new Bytes(first, first + bytes);
  const cudaError_t copied =
      cudaMemcpyAsync(dev.raw_data(), copy->data(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice, ctx.stream);
  const cudaError_t queued =
      copied == cudaSuccess ? cudaLaunchHostFunc(ctx.stream, [](void* p) { delete static_cast<Bytes*>(p); }, copy)
                            : copied;
  if (queued != cudaSuccess) {
    if (copied == cudaSuccess) (void)cudaStreamSynchronize(ctx.stream);  // the copy may still read it
    delete copy;
    MINIDL_CUDA_CHECK_OP(queued, op);
  }
  return dev;
}

}  // namespace minidl::cuda_kernels
