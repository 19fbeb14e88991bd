// The per-element math of softmax / log_softmax on the CUDA backend, shared
// with the CPU tests; the same formulas as ops/cpu/softmax.cpp. Plain C++
// with MINIDL_HOST_DEVICE, no CUDA header.
//
// The input is (outer, D, inner) with D the softmax dim; a "column" is one
// (outer, inner) pair, its D elements `inner` apart.
#pragma once

#include <cmath>
#include <cstdint>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

struct SoftmaxShape {
  int64_t outer = 1, dim_size = 1, inner = 1;
  // Offset of column c's first element, and the column of element i.
  MINIDL_HOST_DEVICE int64_t column_start(int64_t c) const { return (c / inner) * dim_size * inner + c % inner; }
  MINIDL_HOST_DEVICE int64_t column_of(int64_t i) const { return (i / (dim_size * inner)) * inner + i % inner; }
};

// y from x, the column's max and its sum of exp(x - max) (float64, as the CPU).
template <class T>
MINIDL_HOST_DEVICE inline T softmax_output(T x, T max, double sum, bool log) {
  if (log) return x - (max + static_cast<T>(std::log(sum)));
  return std::exp(x - max) * static_cast<T>(1.0 / sum);
}

// The column sum backward needs: sum(g) for log_softmax, sum(g * y) for softmax.
template <class T>
MINIDL_HOST_DEVICE inline double softmax_backward_term(T g, T y, bool log) {
  return log ? static_cast<double>(g) : static_cast<double>(g * y);
}

// dx from g, y and the column's sum s (rounded to T, as the CPU).
template <class T>
MINIDL_HOST_DEVICE inline T softmax_backward_input(T g, T y, T s, bool log) {
  return log ? g - std::exp(y) * s : y * (g - s);
}

}  // namespace minidl::cuda_math
