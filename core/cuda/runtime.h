// The CUDA runtime as the rest of minidl sees it: devices, the current
// stream, error checks. Only compiled with -DMINIDL_CUDA=ON (core/cuda/ is
// built then only) and included only by CUDA-build sources (.cu files,
// core/cuda/, ops/cuda/, ops/cudnn/, dist/nccl/) and, under
// #ifdef MINIDL_WITH_CUDA, by the GPU tests (tests/test_cuda_*.cpp).
//
// PyTorch's model (c10/cuda/CUDAStream.cpp, CUDAFunctions.cpp):
//   - a current device per thread (cudaSetDevice is per thread already);
//   - a current stream per thread and device, by default that device's
//     "default stream" of minidl: one non-blocking stream created on first
//     use (never the legacy stream 0, which synchronizes with every other
//     blocking stream); StreamGuard switches it for a scope;
//   - a pool of non-blocking streams per device, handed out round robin
//     (side streams: communication, pinned copies), never destroyed.
// Every kernel launch and library call of an op goes on
// current_stream(tensor's device index); the caching allocator keys its
// blocks by that stream.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "minidl/core/check.h"
#include "minidl/core/cuda.h"
#include "minidl/core/device.h"

namespace minidl {
class Tensor;
}  // namespace minidl

namespace minidl::cuda {

// is_available, device_count, set_device, synchronize: core/cuda.h.

// ---- errors -----------------------------------------------------------------

// Throws minidl::Error: "CUDA error: <cudaGetErrorString> (<cudaGetErrorName>)
// in <call> at file:line" (plus "while running <op>" when op is given).
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* op, const char* file,
                                   int line);

// Sets the current device for a scope, restoring the previous one after.
// Only devices of type CUDA change anything.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// ---- streams ----------------------------------------------------------------

// The calling thread's current stream on device `index` (-1: current device).
cudaStream_t current_stream(int index = -1);
// Makes `stream` (which must belong to device `index`) current for this
// thread until changed again; StreamGuard is the scoped form.
void set_current_stream(int index, cudaStream_t stream);
// A stream from the device's pool (round robin over 32 non-blocking streams).
cudaStream_t stream_from_pool(int index = -1);

class StreamGuard {
 public:
  StreamGuard(int index, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int index_;
  cudaStream_t previous_;
};

// ---- memory (core/cuda/allocator.cpp) ------------------------------------------

// Tensor.record_stream: t's memory is also used by work queued on `stream`
// (not its allocation stream), so when t is freed the caching allocator
// reuses the block only after that work has run. Call it after queuing the
// work; a no-op for memory not from the CUDA caching allocator's cache.
void record_stream(const Tensor& t, cudaStream_t stream);

// An asynchronous copy on `stream` reads or writes the pinned host tensor
// `host` (non_blocking copies, ops/cuda/copy.cu): its memory is not returned
// to the driver before that work has run (PyTorch's
// CachingHostAllocator_recordEvent). A no-op for memory that is not pinned.
void record_pinned_host_use(const Tensor& host, cudaStream_t stream);

// Installs the CUDA caching allocator (allocator_for(DeviceType::CUDA)) and
// the pinned host allocator. register_cuda_kernels() calls it when
// is_available(); otherwise allocator_for(CUDA) says why CUDA is unavailable.
void register_cuda_backend();

}  // namespace minidl::cuda

// MINIDL_CUDA_CHECK(cudaMemcpyAsync(...)) and, naming the op,
// MINIDL_CUDA_CHECK_OP(cudaMemsetAsync(...), "zero_");
#define MINIDL_CUDA_CHECK(call) MINIDL_CUDA_CHECK_OP(call, nullptr)
#define MINIDL_CUDA_CHECK_OP(call, op)                                                     \
  do {                                                                                     \
    const cudaError_t minidl_cuda_err_ = (call);                                           \
    if (minidl_cuda_err_ != cudaSuccess) [[unlikely]]                                      \
      ::minidl::cuda::throw_cuda_error(minidl_cuda_err_, #call, op, __FILE__, __LINE__);   \
  } while (0)
// After a <<<...>>> launch: reports a bad configuration at once (the kernel's
// own faults surface at the next synchronizing call, as in PyTorch).
#define MINIDL_CUDA_KERNEL_LAUNCH_CHECK(op) MINIDL_CUDA_CHECK_OP(cudaGetLastError(), op)
