#include "minidl/core/cuda/handles.h"

#include "minidl/core/cuda/library_handles.h"  // MINIDL_CUBLAS_CHECK, MINIDL_CUDNN_CHECK

namespace minidl::cuda {

CudaStream CudaStream::create(unsigned flags, int priority) {
  cudaStream_t s = nullptr;
  MINIDL_CUDA_CHECK(cudaStreamCreateWithPriority(&s, flags, priority));
  return CudaStream(s);
}

void CudaStream::synchronize() const { MINIDL_CUDA_CHECK(cudaStreamSynchronize(get())); }

bool CudaStream::query() const {
  const cudaError_t err = cudaStreamQuery(get());
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: clear it
    return false;
  }
  MINIDL_CUDA_CHECK(err);
  return true;
}

CudaEvent CudaEvent::create(bool enable_timing, bool blocking) {
  unsigned flags = (enable_timing ? cudaEventDefault : cudaEventDisableTiming) | (blocking ? cudaEventBlockingSync : 0u);
  cudaEvent_t e = nullptr;
  MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  return CudaEvent(e);
}

void CudaEvent::record(cudaStream_t stream) {
  MINIDL_CHECK(*this, "CudaEvent::record: the event was moved from or never created");
  MINIDL_CUDA_CHECK(cudaEventRecord(get(), stream));
}

void CudaEvent::block(cudaStream_t stream) const {
  MINIDL_CUDA_CHECK(cudaStreamWaitEvent(stream, get(), 0));
}

bool CudaEvent::query() const {
  const cudaError_t err = cudaEventQuery(get());
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  MINIDL_CUDA_CHECK(err);
  return true;
}

void CudaEvent::synchronize() const { MINIDL_CUDA_CHECK(cudaEventSynchronize(get())); }

float CudaEvent::elapsed_time(const CudaEvent& end) const {
  float ms = 0.0f;
  MINIDL_CUDA_CHECK(cudaEventElapsedTime(&ms, get(), end.get()));
  return ms;
}

CublasHandle CublasHandle::create() {
  cublasHandle_t h = nullptr;
  MINIDL_CUBLAS_CHECK(cublasCreate(&h));
  return CublasHandle(h);
}

CublasLtHandle CublasLtHandle::create() {
  cublasLtHandle_t h = nullptr;
  MINIDL_CUBLAS_CHECK(cublasLtCreate(&h));
  return CublasLtHandle(h);
}

CudnnHandle CudnnHandle::create() {
  cudnnHandle_t h = nullptr;
  MINIDL_CUDNN_CHECK(cudnnCreate(&h));
  return CudnnHandle(h);
}

}  // namespace minidl::cuda
