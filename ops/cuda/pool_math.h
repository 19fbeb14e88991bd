// The window math of the CUDA pooling kernels (ops/cuda/pooling.cu), shared
// with the CPU tests: each output's taps along one dimension (window pools
// with padding, dilation and ceil_mode, or PyTorch's adaptive bins), as
// ops/cpu/pooling.cpp computes them, and the inverse the atomic-free
// backward needs: the outputs whose window may hold a given input position.
// Plain C++ with MINIDL_HOST_DEVICE, no CUDA header.
#pragma once

#include <cstdint>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE
#include "minidl/ops/cuda/int_divider.h"

namespace minidl::cuda_math {

struct PoolDim {
  int64_t in = 1, out = 1, kernel = 1, stride = 1, padding = 0, dilation = 1;
  bool adaptive = false;
  // with_dividers(): the divisions below through precomputed 32-bit dividers
  // (ops/cuda/int_divider.h; a 64-bit division is a ~100-instruction routine
  // on a GPU) when every numerator fits; else (`fast` false) 64-bit `/`.
  bool fast = false;
  IntDivider by_in, by_out, by_stride, by_dilation;

  PoolDim with_dividers() const {
    PoolDim r = *this;
    // The largest numerators: (out + 1) in + out (adaptive bins), in + padding + stride + dilation.
    const bool positive = in > 0 && out > 0 && stride > 0 && dilation > 0 && padding >= 0 && kernel > 0;
    r.fast = positive && in < kIntDividerLimit && out < kIntDividerLimit &&
             (in + 1) * (out + 1) + in + out < kIntDividerLimit &&
             in + padding + stride + dilation + kernel * dilation < kIntDividerLimit;
    if (r.fast) {
      r.by_in = IntDivider(in), r.by_out = IntDivider(out);
      r.by_stride = IntDivider(stride), r.by_dilation = IntDivider(dilation);
    }
    return r;
  }
};

// n / d (C++'s truncation), through `by` when the dim's dividers are set and
// n >= 0 (a window past the input's end, from ceil_mode, gives n < 0).
MINIDL_HOST_DEVICE inline int64_t quotient(int64_t n, int64_t d, const IntDivider& by, bool fast) {
  return fast && n >= 0 ? static_cast<int64_t>(by.div(static_cast<uint32_t>(n))) : n / d;
}

// Taps pos = start + i * step for i in [lo, hi) lie inside the input;
// `padded` is the window clipped to the padded input (avg's divisor).
struct Taps {
  int64_t start = 0, lo = 0, hi = 0, step = 1, padded = 0;
};

MINIDL_HOST_DEVICE inline Taps taps_of(const PoolDim& d, int64_t o) {
  Taps t;
  if (d.adaptive) {  // PyTorch's bins [floor(o in / out), ceil((o + 1) in / out))
    const int64_t b0 = quotient(o * d.in, d.out, d.by_out, d.fast);
    const int64_t b1 = quotient((o + 1) * d.in + d.out - 1, d.out, d.by_out, d.fast);
    t.start = b0;
    t.lo = 0;
    t.hi = b1 - b0;
    t.step = 1;
    t.padded = b1 - b0;
    return t;
  }
  t.start = o * d.stride - d.padding;
  t.step = d.dilation;
  t.lo = t.start < 0 ? quotient(-t.start + d.dilation - 1, d.dilation, d.by_dilation, d.fast) : 0;
  const int64_t fit = quotient(d.in - t.start + d.dilation - 1, d.dilation, d.by_dilation, d.fast);
  const int64_t hi = d.kernel < fit ? d.kernel : fit;
  t.hi = hi > t.lo ? hi : t.lo;
  const int64_t end = t.start + d.kernel < d.in + d.padding ? t.start + d.kernel : d.in + d.padding;
  t.padded = end - t.start;
  return t;
}

// Whether input position i is one of t's taps.
MINIDL_HOST_DEVICE inline bool is_tap(const Taps& t, int64_t i) {
  const int64_t rel = i - t.start;
  if (rel < 0) return false;
  if (t.step == 1) return rel >= t.lo && rel < t.hi;  // no dilation: no division
  if (rel % t.step != 0) return false;
  const int64_t k = rel / t.step;
  return k >= t.lo && k < t.hi;
}

// True when no input position along d lies in two outputs' windows (a
// window spans (kernel - 1) dilation + 1 positions; adaptive bins are
// disjoint exactly when out divides in): max pooling's backward can then
// scatter each output's gradient to its saved index without atomics.
MINIDL_HOST_DEVICE inline bool windows_disjoint(const PoolDim& d) {
  if (d.adaptive) return d.out > 0 && d.in % d.out == 0;
  return d.stride >= (d.kernel - 1) * d.dilation + 1;
}

// An inclusive range [first, last] of outputs (clipped to [0, out)) that
// contains every output whose taps include input position i (it may hold
// more: callers test each with is_tap). Empty when first > last.
MINIDL_HOST_DEVICE inline void outputs_touching(const PoolDim& d, int64_t i, int64_t& first, int64_t& last) {
  if (d.adaptive) {
    first = quotient(i * d.out, d.in, d.by_in, d.fast) - 1;
    last = quotient((i + 1) * d.out + d.in - 1, d.in, d.by_in, d.fast);
  } else {
    // o stride - padding <= i <= o stride - padding + (kernel - 1) dilation
    const int64_t lo_num = i + d.padding - (d.kernel - 1) * d.dilation;
    first = lo_num <= 0 ? 0 : quotient(lo_num + d.stride - 1, d.stride, d.by_stride, d.fast);
    const int64_t hi_num = i + d.padding;
    last = hi_num < 0 ? -1 : quotient(hi_num, d.stride, d.by_stride, d.fast);
  }
  if (first < 0) first = 0;
  if (last > d.out - 1) last = d.out - 1;
}

// Flat index -> (plane, d, h, w) of a (planes, D, H, W) layout; `fast`: the
// index fits 31 bits and the dividers are set (by_plane divides by plane_size).
struct Index4 {
  int64_t plane, d, h, w;
};

MINIDL_HOST_DEVICE inline Index4 split_index(int64_t flat, int64_t plane_size, int64_t H, int64_t W,
                                             const IntDivider& by_plane, const IntDivider& by_h,
                                             const IntDivider& by_w, bool fast) {
  Index4 r;
  if (fast) {
    const uint32_t f = static_cast<uint32_t>(flat);
    const uint32_t plane = by_plane.div(f), in_plane = f - plane * static_cast<uint32_t>(plane_size);
    const uint32_t row = by_w.div(in_plane), dd = by_h.div(row);
    r.plane = plane;
    r.w = in_plane - row * static_cast<uint32_t>(W);
    r.h = row - dd * static_cast<uint32_t>(H);
    r.d = dd;
    return r;
  }
  r.plane = flat / plane_size;
  int64_t rest = flat % plane_size;
  r.w = rest % W;
  rest /= W;
  r.h = rest % H;
  r.d = rest / H;
  return r;
}

// A pooled tensor's memory index m, laid out planar (step 1: m = plane
// * plane_size + pos) or channels-last (step = C channels: m = (n *
// plane_size + pos) * C + c, plane n C + c): `rest` is m without the channel
// (split_index takes it apart into (plane or sample, d, h, w)), `inner` the
// channel (0 when planar).
struct ChannelSplit {
  int64_t rest, inner;
};

MINIDL_HOST_DEVICE inline ChannelSplit split_channel(int64_t m, int64_t step, const IntDivider& by_step, bool fast) {
  if (step == 1) return {m, 0};
  const int64_t rest = quotient(m, step, by_step, fast);
  return {rest, m - rest * step};
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

// Whether max pooling's gradient goes to an output's saved index: only when
// its window has a tap inside the input along every dimension. A window with
// none (dilation stepping over a small plane from the padding) has output
// -inf and PyTorch's index of its first position past the padding, which is
// no tap of the window (an element of a later row, or one past the plane):
// the output depends on no input, so it routes nothing (its gradient, 0, as
// finite differences give). PyTorch's CPU backward adds it to the element
// the index names (or past the plane); its CUDA gather to that element when
// the output is among those whose windows' range covers it.
MINIDL_HOST_DEVICE inline bool routes_gradient(const Taps& td, const Taps& th, const Taps& tw) {
  return !empty_window(td, th, tw);
}

// Whether some output along d has a window with no tap inside the input.
// Only a window starting in the padding (start < 0) or past the input's end
// can have none, and the starts grow with o: the first outputs and the last
// one (ceil_mode's) decide.
MINIDL_HOST_DEVICE inline bool some_window_empty(const PoolDim& d) {
  auto empty = [&d](int64_t o) {
    const Taps t = taps_of(d, o);
    return t.hi <= t.lo;
  };
  for (int64_t o = 0; o < d.out && o * d.stride < d.padding; ++o)
    if (empty(o)) return true;
  return d.out > 0 && empty(d.out - 1);
}

}  // namespace minidl::cuda_math
