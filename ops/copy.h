// Copies between tensors of any strides, dtypes and devices. The CPU kernel
// lives here; a CUDA backend registers host<->device and device copies.
#pragma once

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

// ---- kernel interface (a backend registers its kernels here) ----------------

// dst and src have the same shape (src already broadcast); any dtypes.
// non_blocking (Tensor::to(device, true)): the caller does not need a copy
// between host and device finished on return; a backend may then leave one
// from/to pinned host memory running (the CPU kernel ignores it).
using CopyFn = void(const Tensor& dst, const Tensor& src, bool non_blocking);
extern DispatchStub<CopyFn> copy_stub;  // keyed by the device that runs the copy
void register_copy_cpu_kernels();
void register_copy_cuda_kernels();  // ops/cuda/copy.cu (CUDA builds)

}  // namespace minidl
