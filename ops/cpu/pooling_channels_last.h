// CPU kernels of 2-D pooling on channels-last (NHWC) tensors: the
// PoolGeometry::channels_last > 0 case of ops/pooling.h's kernel interface,
// called from ops/cpu/pooling.cpp's dispatch. T: float, double, Half, BFloat16.
#pragma once

#include <cstdint>

#include "minidl/ops/pooling.h"

namespace minidl::cpu {

template <class T>
void max_pool_forward_channels_last(const T* x, T* y, int64_t* indices, const PoolGeometry& g);
template <class T>
void max_pool_backward_channels_last(const T* grad_y, const int64_t* indices, T* grad_x, const PoolGeometry& g);
template <class T>
void avg_pool_forward_channels_last(const T* x, T* y, const PoolGeometry& g);
template <class T>
void avg_pool_backward_channels_last(const T* grad_y, T* grad_x, const PoolGeometry& g);

}  // namespace minidl::cpu
