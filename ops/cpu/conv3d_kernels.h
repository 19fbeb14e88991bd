// CPU kernels of conv3d over raw NCDHW pointers (no Tensor), so tests,
// benchmarks and conv_transpose3d can call them directly; ops/cpu/conv3d.cpp
// registers them as the op's CPU kernels and explains how they work.
// T: float, double, or BFloat16/Half (read and written as they are,
// computed in float32, each output rounded once).
#pragma once

#include <cstdint>

#include "minidl/ops/conv3d.h"  // Conv3dGeometry

namespace minidl {

// x: (N, C, D, H, W); w: (K, C/groups, kD, kH, kW); bias: (K) or nullptr;
// y: (N, K, out_d, out_h, out_w). Overwrites y.
template <class T>
void conv3d_forward_kernel(const Conv3dGeometry& g, const T* x, const T* w, const T* bias, T* y);

// dx = dL/dx given dy = dL/dy. Overwrites dx (N, C, D, H, W).
template <class T>
void conv3d_backward_input_kernel(const Conv3dGeometry& g, const T* dy, const T* w, T* dx);

// dw = dL/dw and dbias = dL/dbias; either may be nullptr (not wanted). Overwrites.
template <class T>
void conv3d_backward_weight_kernel(const Conv3dGeometry& g, const T* dy, const T* x, T* dw, T* dbias);

// Output depths computed per conv2d call (the chunk), exposed for tests that
// want chunks with a remainder.
int64_t conv3d_depth_chunk(const Conv3dGeometry& g, int64_t element_size);

}  // namespace minidl
