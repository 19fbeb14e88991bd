// Move-only owners of CUDA runtime and library objects: streams, events,
// cuBLAS(Lt) and cuDNN handles. Creation throws minidl::Error naming the
// call; destruction never throws (an error there, e.g. after the CUDA runtime
// was unloaded at exit, is ignored: there is nobody left to tell).
// Backend-only, like core/cuda/runtime.h.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <utility>

namespace minidl::cuda {

// The shared move-only shape: owns a T, released with Destroy.
template <class T, class Destroy>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(T h) : h_(h) {}
  ~UniqueHandle() { reset(); }
  UniqueHandle(UniqueHandle&& o) noexcept : h_(std::exchange(o.h_, T{})) {}
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, T{});
    }
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  T get() const { return h_; }
  explicit operator bool() const { return h_ != T{}; }
  T release() { return std::exchange(h_, T{}); }
  void reset() noexcept {
    if (h_ != T{}) Destroy{}(std::exchange(h_, T{}));
  }

 private:
  T h_{};
};

namespace detail {
struct DestroyStream { void operator()(cudaStream_t s) const noexcept { (void)cudaStreamDestroy(s); } };
struct DestroyEvent { void operator()(cudaEvent_t e) const noexcept { (void)cudaEventDestroy(e); } };
struct DestroyCublas { void operator()(cublasHandle_t h) const noexcept { (void)cublasDestroy(h); } };
struct DestroyCublasLt { void operator()(cublasLtHandle_t h) const noexcept { (void)cublasLtDestroy(h); } };
struct DestroyCudnn { void operator()(cudnnHandle_t h) const noexcept { (void)cudnnDestroy(h); } };
}  // namespace detail

// A stream of the current device; non-blocking by default (never
// synchronizes with the legacy stream 0). Streams owned by the runtime (the
// default and pool streams of core/cuda/runtime.h) are never wrapped: they
// live as long as the process.
class CudaStream : public UniqueHandle<cudaStream_t, detail::DestroyStream> {
 public:
  CudaStream() = default;
  static CudaStream create(unsigned flags = cudaStreamNonBlocking, int priority = 0);
  void synchronize() const;  // blocks the host until the stream's work has run
  bool query() const;        // true when the stream has no pending work
  using UniqueHandle::UniqueHandle;  // adopts an existing handle
};

// An event on the current device. Without enable_timing it is a pure fence
// (cudaEventDisableTiming: cheaper to record and to wait on).
class CudaEvent : public UniqueHandle<cudaEvent_t, detail::DestroyEvent> {
 public:
  CudaEvent() = default;
  static CudaEvent create(bool enable_timing = false, bool blocking = false);
  // Captures `stream`'s work queued so far.
  void record(cudaStream_t stream);
  // Later work on `stream` waits for the recorded work (no host block).
  void block(cudaStream_t stream) const;
  bool query() const;        // true when the recorded work has run
  void synchronize() const;  // blocks the host until it has
  // Milliseconds from this event to `end` (both recorded, timing enabled).
  float elapsed_time(const CudaEvent& end) const;
  using UniqueHandle::UniqueHandle;  // adopts an existing handle
};

// Library handles on the current device. Backend code takes the per-thread
// ones of core/cuda/library_handles.h instead of creating its own.
class CublasHandle : public UniqueHandle<cublasHandle_t, detail::DestroyCublas> {
 public:
  CublasHandle() = default;
  static CublasHandle create();
  using UniqueHandle::UniqueHandle;  // adopts an existing handle
};
class CublasLtHandle : public UniqueHandle<cublasLtHandle_t, detail::DestroyCublasLt> {
 public:
  CublasLtHandle() = default;
  static CublasLtHandle create();
  using UniqueHandle::UniqueHandle;  // adopts an existing handle
};
class CudnnHandle : public UniqueHandle<cudnnHandle_t, detail::DestroyCudnn> {
 public:
  CudnnHandle() = default;
  static CudnnHandle create();
  using UniqueHandle::UniqueHandle;  // adopts an existing handle
};

}  // namespace minidl::cuda
