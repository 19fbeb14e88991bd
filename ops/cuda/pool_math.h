// The window math of the CUDA pooling kernels (ops/cuda/pooling.cu), shared
// with the CPU tests: each output's taps along one dimension (window pools
// with padding, dilation and ceil_mode, or PyTorch's adaptive bins), as
// ops/cpu/pooling.cpp computes them, and the inverse the atomic-free
// backward needs: the outputs whose window may hold a given input position.
// Plain C++ with MINIDL_HOST_DEVICE, no CUDA header.
#pragma once

#include <cstdint>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

struct PoolDim {
  int64_t in = 1, out = 1, kernel = 1, stride = 1, padding = 0, dilation = 1;
  bool adaptive = false;
};

// Taps pos = start + i * step for i in [lo, hi) lie inside the input;
// `padded` is the window clipped to the padded input (avg's divisor).
struct Taps {
  int64_t start = 0, lo = 0, hi = 0, step = 1, padded = 0;
};

MINIDL_HOST_DEVICE inline Taps taps_of(const PoolDim& d, int64_t o) {
  Taps t;
  if (d.adaptive) {  // PyTorch's bins [floor(o in / out), ceil((o + 1) in / out))
    const int64_t b0 = (o * d.in) / d.out, b1 = ((o + 1) * d.in + d.out - 1) / d.out;
    t.start = b0;
    t.lo = 0;
    t.hi = b1 - b0;
    t.step = 1;
    t.padded = b1 - b0;
    return t;
  }
  t.start = o * d.stride - d.padding;
  t.step = d.dilation;
  t.lo = t.start < 0 ? (-t.start + d.dilation - 1) / d.dilation : 0;
  const int64_t fit = (d.in - t.start + d.dilation - 1) / d.dilation;
  const int64_t hi = d.kernel < fit ? d.kernel : fit;
  t.hi = hi > t.lo ? hi : t.lo;
  const int64_t end = t.start + d.kernel < d.in + d.padding ? t.start + d.kernel : d.in + d.padding;
  t.padded = end - t.start;
  return t;
}

// Whether input position i is one of t's taps.
MINIDL_HOST_DEVICE inline bool is_tap(const Taps& t, int64_t i) {
  const int64_t rel = i - t.start;
  if (rel < 0 || rel % t.step != 0) return false;
  const int64_t k = rel / t.step;
  return k >= t.lo && k < t.hi;
}

// An inclusive range [first, last] of outputs (clipped to [0, out)) that
// contains every output whose taps include input position i (it may hold
// more: callers test each with is_tap). Empty when first > last.
MINIDL_HOST_DEVICE inline void outputs_touching(const PoolDim& d, int64_t i, int64_t& first, int64_t& last) {
  if (d.adaptive) {
    first = (i * d.out) / d.in - 1;
    last = ((i + 1) * d.out + d.in - 1) / d.in;
  } else {
    // o stride - padding <= i <= o stride - padding + (kernel - 1) dilation
    const int64_t lo_num = i + d.padding - (d.kernel - 1) * d.dilation;
    first = lo_num <= 0 ? 0 : (lo_num + d.stride - 1) / d.stride;
    const int64_t hi_num = i + d.padding;
    last = hi_num < 0 ? -1 : hi_num / d.stride;
  }
  if (first < 0) first = 0;
  if (last > d.out - 1) last = d.out - 1;
}

// avg's divisor: divisor_override, else the padded window (count_include_pad)
// or the taps inside the input.
MINIDL_HOST_DEVICE inline double pool_divisor(const Taps& td, const Taps& th, const Taps& tw, bool count_include_pad,
                                              int64_t divisor_override) {
  if (divisor_override != 0) return static_cast<double>(divisor_override);
  if (count_include_pad) return static_cast<double>(td.padded * th.padded * tw.padded);
  return static_cast<double>((td.hi - td.lo) * (th.hi - th.lo) * (tw.hi - tw.lo));
}

MINIDL_HOST_DEVICE inline bool empty_window(const Taps& td, const Taps& th, const Taps& tw) {
  return td.hi <= td.lo || th.hi <= th.lo || tw.hi <= tw.lo;
}

}  // namespace minidl::cuda_math
