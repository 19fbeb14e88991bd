// The coordinate math of the CUDA upsample kernels (ops/cuda/upsample.cu),
// shared with the CPU tests: each output coordinate's source taps and linear
// weights with PyTorch's formulas (as ops/cpu/interpolate.cpp: float for the
// nearest modes, the tensor's type for linear), and their inverse per input
// index for the atomic-free backward, found per thread by binary search over
// the same taps (no table uploaded, so the kernels can be captured in a CUDA
// graph). Plain C++ with MINIDL_HOST_DEVICE.
#pragma once

#include <cmath>
#include <cstdint>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

// 0 nearest, 1 nearest-exact, 2 linear (ops/interpolate.h's UpsampleMode).
struct UpsampleDim {
  int64_t in = 1, out = 1;
  double scale = 0;  // the user's scale_factor, or 0: in / out
  int mode = 0;
  bool align_corners = false;
};

// Output coordinate -> x[i0] l0 + x[i1] l1 (nearest: l0 = 1, l1 = 0, i1 = i0).
template <class T>
struct UpsampleTap {
  int64_t i0, i1;
  T l0, l1;
};

template <class S>
MINIDL_HOST_DEVICE inline S upsample_source_scale(double scale, int64_t in, int64_t out) {
  return scale > 0 ? static_cast<S>(1.0 / scale) : static_cast<S>(in) / static_cast<S>(out);
}

template <class T>
MINIDL_HOST_DEVICE inline UpsampleTap<T> upsample_tap(const UpsampleDim& d, int64_t o) {
  const int64_t in = d.in, out = d.out;
  if (d.mode != 2) {  // PyTorch's nearest_idx / nearest_exact_idx
    int64_t src;
    if (d.mode == 0 && out == in) {
      src = o;
    } else if (d.mode == 0 && out == 2 * in) {
      src = o >> 1;
    } else {
      const float scale = upsample_source_scale<float>(d.scale, in, out);
      const float at = d.mode == 0 ? static_cast<float>(o) * scale : (static_cast<float>(o) + 0.5f) * scale;
      const int64_t f = static_cast<int64_t>(std::floor(at));
      src = f < in - 1 ? f : in - 1;
    }
    return UpsampleTap<T>{src, src, T(1), T(0)};
  }
  if (out == in) return UpsampleTap<T>{o, o, T(1), T(0)};  // PyTorch copies
  const T scale = d.align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                                  : upsample_source_scale<T>(d.scale, in, out);
  T src = d.align_corners ? scale * static_cast<T>(o) : scale * (static_cast<T>(o) + T(0.5)) - T(0.5);
  if (!d.align_corners && src < 0) src = 0;
  UpsampleTap<T> t;
  const int64_t f = static_cast<int64_t>(std::floor(src));
  t.i0 = f < in - 1 ? f : in - 1;
  T l1 = src - static_cast<T>(t.i0);
  l1 = l1 < T(0) ? T(0) : (l1 > T(1) ? T(1) : l1);
  t.l1 = l1;
  t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
  t.l0 = T(1) - t.l1;
  return t;
}

// The first output o in [0, out) with upsample_tap<T>(d, o).i0 >= j (out when
// none). i0 is non-decreasing in o (a positive scale times a growing
// coordinate, floored and clamped, or o and o / 2 in the special cases), so a
// binary search over the taps the forward computes finds it, rounding included.
template <class T>
MINIDL_HOST_DEVICE inline int64_t upsample_first_output(const UpsampleDim& d, int64_t j) {
  int64_t lo = 0, hi = d.out;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (upsample_tap<T>(d, mid).i0 < j)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// The outputs that read input index j along one dim: those in
// [below, first) through their l1 tap (i0 == j - 1, so i1 == j; linear only),
// then those in [first, end) through l0 (i0 == j) and, where i1 is j too
// (j == in - 1), through l1.
struct UpsampleReaderSpan {
  int64_t below = 0, first = 0, end = 0;
};

template <class T>
MINIDL_HOST_DEVICE inline UpsampleReaderSpan upsample_reader_span(const UpsampleDim& d, int64_t j) {
  UpsampleReaderSpan r;
  r.first = upsample_first_output<T>(d, j);
  r.end = upsample_first_output<T>(d, j + 1);
  r.below = d.mode == 2 && j > 0 ? upsample_first_output<T>(d, j - 1) : r.first;
  return r;
}

// Calls f(o, w) for every output o reading input index j along one dim with
// weight w, in increasing o, the l0 tap before the l1 tap of the same o; l1
// taps of weight 0 are skipped (l0 ones are not): the order and the weights of
// a list built by walking o and appending each tap to its input's list.
template <class T, class F>
MINIDL_HOST_DEVICE inline void for_each_upsample_reader(const UpsampleDim& d, int64_t j,
                                                        const UpsampleReaderSpan& r, F&& f) {
  for (int64_t o = r.below; o < r.first; ++o) {
    const UpsampleTap<T> t = upsample_tap<T>(d, o);
    if (t.l1 != T(0) && t.i1 == j) f(o, t.l1);
  }
  for (int64_t o = r.first; o < r.end; ++o) {
    const UpsampleTap<T> t = upsample_tap<T>(d, o);
    f(o, t.l0);
    if (t.l1 != T(0) && t.i1 == j) f(o, t.l1);
  }
}

template <class T, class F>
MINIDL_HOST_DEVICE inline void for_each_upsample_reader(const UpsampleDim& d, int64_t j, F&& f) {
  for_each_upsample_reader<T>(d, j, upsample_reader_span<T>(d, j), f);
}

}  // namespace minidl::cuda_math
