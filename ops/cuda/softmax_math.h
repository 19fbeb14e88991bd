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
#include "minidl/ops/cuda/int_divider.h"

namespace minidl::cuda_math {

// with_dividers() precomputes the index divisions (ops/cuda/int_divider.h:
// a 64-bit `/` is a ~100-instruction routine on a GPU) when every offset fits
// 31 bits; without them (aggregate-initialized, or a huge tensor) the same
// functions divide in 64 bits.
struct SoftmaxShape {
  int64_t outer = 1, dim_size = 1, inner = 1;
  bool fast = false;
  IntDivider by_run, by_inner;  // run = dim_size * inner: one outer index's values

  SoftmaxShape with_dividers() const {
    SoftmaxShape r = *this;
    r.fast = outer > 0 && dim_size > 0 && inner > 0 && fits_int_divider(outer * dim_size * inner);
    if (r.fast) r.by_run = IntDivider(dim_size * inner), r.by_inner = IntDivider(inner);
    return r;
  }
  // Offset of column c's first element, and the column of element i.
  MINIDL_HOST_DEVICE int64_t column_start(int64_t c) const {
    if (fast) {
      if (inner == 1) return c * dim_size;
      const uint32_t o = by_inner.div(static_cast<uint32_t>(c));
      return static_cast<int64_t>(o) * dim_size * inner + (c - static_cast<int64_t>(o) * inner);
    }
    return (c / inner) * dim_size * inner + c % inner;
  }
  MINIDL_HOST_DEVICE int64_t column_of(int64_t i) const {
    if (fast) {
      const int64_t o = by_run.div(static_cast<uint32_t>(i));
      return inner == 1 ? o : o * inner + by_inner.mod(static_cast<uint32_t>(i));
    }
    return (i / (dim_size * inner)) * inner + i % inner;
  }
};

// What a column's outputs need besides its max, made once a column from the
// float64 sum of exp(x - max), rounded to T as the CPU kernel rounds it:
// log_softmax log(sum), softmax 1 / sum.
template <class T>
MINIDL_HOST_DEVICE inline T softmax_column_factor(T max, double sum, bool log) {
  (void)max;
  return log ? static_cast<T>(std::log(sum)) : static_cast<T>(1.0 / sum);
}

// log_softmax is (x - max) - log(sum), as PyTorch and the CPU kernel: the
// shift max + log(sum) rounded to T lost digits in proportion to the max.
template <class T>
MINIDL_HOST_DEVICE inline T softmax_output_with(T x, T max, T factor, bool log) {
  return log ? (x - max) - factor : std::exp(x - max) * factor;
}

// y from x, the column's max and its sum of exp(x - max) (float64, as the CPU).
template <class T>
MINIDL_HOST_DEVICE inline T softmax_output(T x, T max, double sum, bool log) {
  return softmax_output_with(x, max, softmax_column_factor(max, sum, log), log);
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
