// The bfloat16 CPU kernels of matmul, linear and conv2d on bf16_gemm's
// dot-product path (ops/cpu/bf16_gemm.h): operands read as bfloat16, sums in
// float32, each output rounded once. The registered CPU kernels
// (ops/cpu/matmul.cpp, ops/cpu/conv2d.cpp) call these when
// bf16_dot_applies(); otherwise they keep Float32Compute's path (whole
// operands widened to float32, the float32 kernels, results rounded), which
// is also what a CPU without AVX512-BF16 (or MINIDL_CPU_BF16_DOT=0) runs.
#pragma once

#include <initializer_list>

#include "minidl/core/tensor.h"
#include "minidl/ops/conv2d.h"
#include "minidl/ops/matmul.h"

namespace minidl::cpu {

// bf16_dot_enabled() and every defined tensor is a CPU-addressable BFloat16 tensor.
bool bf16_dot_applies(std::initializer_list<const Tensor*> tensors);

// Same contracts as ops/matmul.h's kernel interface (c contiguous).
void batched_gemm_bf16(const GemmBatch& g, const Tensor& a, const Tensor& b, const Tensor& c);
void linear_forward_bf16(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
void linear_backward_bf16(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                          const Tensor& dbias);

// Same contracts as ops/conv2d.h's kernel interface (ops/cpu/conv2d_bf16.cpp).
void conv2d_forward_bf16(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Tensor& y);
void conv2d_backward_bf16(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                          const Tensor& dx, const Tensor& dw, const Tensor& dbias);

// The same on raw contiguous NCHW pointers (bias may be nullptr).
void conv2d_forward_bf16(const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w, const BFloat16* bias,
                         BFloat16* y);
void conv2d_backward_input_bf16(const Conv2dGeometry& g, const BFloat16* dy, const BFloat16* w, BFloat16* dx);

// conv2d's grad weight on raw NCHW bfloat16 operands added into float32
// sums (out_channels x C/groups * kH * kW, the weight's memory order): the
// chunks of images in turn on the calling thread (each GEMM splits itself
// over the threads outside a parallel region). For callers that sum several
// calls before rounding once: conv3d's chunks of depths (ops/cpu/conv3d.cpp).
void conv2d_backward_weight_bf16_accumulate(const Conv2dGeometry& g, const BFloat16* dy, const BFloat16* x,
                                            float* sums);

}  // namespace minidl::cpu
