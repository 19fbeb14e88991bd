// cuBLAS(Lt) and cuDNN handles for backend code: one per (thread, device),
// created on first use and kept for the thread's life (a handle shared
// between threads would share its stream and workspace settings: PyTorch's
// CublasHandlePool.cpp). Each fetch binds the handle to the calling thread's
// current stream of that device (core/cuda/runtime.h), so a library call
// made through it is ordered like a kernel launch on that stream.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>

#include "minidl/core/cuda/runtime.h"

namespace minidl::cuda {

// Bound to current_stream(index) with cublasSetStream, and to a workspace of
// cublas_workspace_size() bytes for that stream (from the caching allocator).
cublasHandle_t cublas_handle(int index = -1);
// Not bound to anything: cublasLtMatmul takes the stream and the workspace
// per call (pass current_stream(index) and a block from the caching allocator).
cublasLtHandle_t cublaslt_handle(int index = -1);
// Bound to current_stream(index) with cudnnSetStream.
cudnnHandle_t cudnn_handle(int index = -1);

// cuBLAS workspace per (handle, stream): 32 MiB on sm_90 (PyTorch's choice
// for Hopper), else 8 MiB; CUBLAS_WORKSPACE_CONFIG=:SIZE_KiB:COUNT overrides.
size_t cublas_workspace_size();

}  // namespace minidl::cuda

// Throws minidl::Error with cublasGetStatusString / cudnnGetErrorString.
#define MINIDL_CUBLAS_CHECK(call)                                                             \
  do {                                                                                        \
    const cublasStatus_t minidl_cublas_st_ = (call);                                          \
    if (minidl_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                              \
      MINIDL_FAIL("cuBLAS error: ", cublasGetStatusString(minidl_cublas_st_), " in ", #call); \
  } while (0)
#define MINIDL_CUDNN_CHECK(call)                                                              \
  do {                                                                                        \
    const cudnnStatus_t minidl_cudnn_st_ = (call);                                            \
    if (minidl_cudnn_st_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                \
      MINIDL_FAIL("cuDNN error: ", cudnnGetErrorString(minidl_cudnn_st_), " in ", #call);     \
  } while (0)
