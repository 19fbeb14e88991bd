// The CUDA pooling kernels' per-thread work (ops/cuda/pooling.cu launches
// them, a thread per output or per input element): functors of a flat
// memory index, plain C++ with MINIDL_HOST_DEVICE, so the CPU tests run them
// over every index and compare with the CPU kernels
// (tests/test_cuda_pool_kernels.cpp): the planar and the channels-last
// addressing are checked without a GPU. Window math in pool_math.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "minidl/ops/cuda/offset_calculator.h"
#include "minidl/ops/cuda/opmath.h"
#include "minidl/ops/cuda/pool_math.h"
#include "minidl/ops/pooling.h"

namespace minidl::cuda_kernels::pool {

using cuda_math::IntDivider;
using cuda_math::Offsets;
using cuda_math::opmath_t;
using cuda_math::PoolDim;
using cuda_math::Taps;
using cuda_math::from_opmath;
using cuda_math::to_opmath;

// The geometry on the device: D, H, W as PoolDims.
// `fast`: every flat index fits 31 bits, so an index splits into (plane, d,
// h, w) through precomputed 32-bit dividers (ops/cuda/int_divider.h) rather
// than 64-bit divisions. `step`: 1 planar, C channels-last (a plane's
// elements lie C apart; pool_math.h's split_channel).
struct Pool3 {
  PoolDim d[3];
  bool count_include_pad;
  int64_t divisor_override;
  int64_t in_plane, out_plane, step;
  bool fast;
  bool some_window_empty;  // an output's window has no tap inside the input (cuda_math::routes_gradient)
  IntDivider by_in_plane, by_out_plane, by_in_w, by_in_h, by_out_w, by_out_h, by_step;
};

inline Pool3 device_geometry(const PoolGeometry& g) {
  Pool3 p;
  for (int i = 0; i < 3; ++i)
    p.d[i] = PoolDim{g.in[i], g.out[i], g.kernel[i], g.stride[i], g.padding[i], g.dilation[i], g.adaptive}
                 .with_dividers();
  p.count_include_pad = g.count_include_pad;
  p.divisor_override = g.divisor_override;
  p.in_plane = g.in_plane();
  p.out_plane = g.out_plane();
  p.step = g.channels_last > 0 ? g.channels_last : 1;
  p.some_window_empty = cuda_math::some_window_empty(p.d[0]) || cuda_math::some_window_empty(p.d[1]) ||
                        cuda_math::some_window_empty(p.d[2]);
  p.fast = g.planes > 0 && p.in_plane > 0 && p.out_plane > 0 &&
           cuda_math::fits_int_divider(g.planes * std::max(p.in_plane, p.out_plane));
  if (p.fast) {
    p.by_in_plane = IntDivider(p.in_plane), p.by_out_plane = IntDivider(p.out_plane);
    p.by_in_w = IntDivider(g.in[2]), p.by_in_h = IntDivider(g.in[1]);
    p.by_out_w = IntDivider(g.out[2]), p.by_out_h = IntDivider(g.out[1]);
    p.by_step = IntDivider(p.step);
  }
  return p;
}


// Output o (a memory index): where its plane starts in the input (the
// plane's position p is at base + p * step) and its taps.
struct OutputWindow {
  int64_t base;
  Taps t[3];
};

MINIDL_HOST_DEVICE inline OutputWindow window_of(const Pool3& g, int64_t o) {
  OutputWindow w;
  const cuda_math::ChannelSplit s = cuda_math::split_channel(o, g.step, g.by_step, g.fast);
  const cuda_math::Index4 i = cuda_math::split_index(s.rest, g.out_plane, g.d[1].out, g.d[2].out, g.by_out_plane,
                                                     g.by_out_h, g.by_out_w, g.fast);
  w.base = i.plane * g.in_plane * g.step + s.inner;
  w.t[0] = cuda_math::taps_of(g.d[0], i.d);
  w.t[1] = cuda_math::taps_of(g.d[1], i.h);
  w.t[2] = cuda_math::taps_of(g.d[2], i.w);
  return w;
}

MINIDL_HOST_DEVICE inline int64_t tap_pos(const Taps& t, int64_t i) { return t.start + i * t.step; }

template <class T>
struct MaxPoolForward {
  const T* x;
  T* y;
  int64_t* idx;
  Pool3 g;
  MINIDL_HOST_DEVICE void operator()(const Offsets<1>& off) const {
    const int64_t o = off.v[0];
    const OutputWindow w = window_of(g, o);
    const Taps &td = w.t[0], &th = w.t[1], &tw = w.t[2];
    const int64_t H = g.d[1].in, W = g.d[2].in;
    const T* xp = x + w.base;
    // First tap inside the input: PyTorch's index when the window holds only -inf.
    int64_t best_i = (tap_pos(td, td.lo) * H + tap_pos(th, th.lo)) * W + tap_pos(tw, tw.lo);
    opmath_t<T> best = -INFINITY;
    for (int64_t a = td.lo; a < td.hi; ++a)
      for (int64_t b = th.lo; b < th.hi; ++b) {
        const int64_t row = (tap_pos(td, a) * H + tap_pos(th, b)) * W;
        for (int64_t c = tw.lo; c < tw.hi; ++c) {
          const int64_t i = row + tap_pos(tw, c);
          const opmath_t<T> v = to_opmath(xp[i * g.step]);
          if (v > best || v != v) {  // NaN propagates, as in PyTorch
            best = v;
            best_i = i;
          }
        }
      }
    y[o] = from_opmath<T>(best);
    idx[o] = best_i;
  }
};

// Input element e (a memory index) = (plane or sample, d, h, w) and channel:
// calls f(output memory index, od, oh, ow) for every output in the box of
// outputs_touching's ranges, in increasing output order: a superset of the
// outputs whose window holds e (with dilation or adaptive bins, some do not).
template <class F>
MINIDL_HOST_DEVICE inline void for_each_candidate_output(const Pool3& g, const cuda_math::ChannelSplit& s,
                                                         const cuda_math::Index4& in, F&& f) {
  int64_t d0, d1, h0, h1, w0, w1;
  cuda_math::outputs_touching(g.d[0], in.d, d0, d1);
  cuda_math::outputs_touching(g.d[1], in.h, h0, h1);
  cuda_math::outputs_touching(g.d[2], in.w, w0, w1);
  for (int64_t od = d0; od <= d1; ++od)
    for (int64_t oh = h0; oh <= h1; ++oh) {
      const int64_t row = in.plane * g.out_plane + (od * g.d[1].out + oh) * g.d[2].out;
      for (int64_t ow = w0; ow <= w1; ++ow) f((row + ow) * g.step + s.inner, od, oh, ow);
    }
}

MINIDL_HOST_DEVICE inline cuda_math::Index4 input_position(const Pool3& g, const cuda_math::ChannelSplit& s) {
  return cuda_math::split_index(s.rest, g.in_plane, g.d[1].in, g.d[2].in, g.by_in_plane, g.by_in_h, g.by_in_w, g.fast);
}

// As above, only the outputs whose window holds e, with their taps.
template <class F>
MINIDL_HOST_DEVICE inline void for_each_touching_output(const Pool3& g, int64_t e, F&& f) {
  const cuda_math::ChannelSplit s = cuda_math::split_channel(e, g.step, g.by_step, g.fast);
  const cuda_math::Index4 in = input_position(g, s);
  for_each_candidate_output(g, s, in, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
    const Taps td = cuda_math::taps_of(g.d[0], od), th = cuda_math::taps_of(g.d[1], oh),
               tw = cuda_math::taps_of(g.d[2], ow);
    if (cuda_math::is_tap(td, in.d) && cuda_math::is_tap(th, in.h) && cuda_math::is_tap(tw, in.w)) f(o, td, th, tw);
  });
}

// gx[e] = sum of gy[o] over the outputs whose argmax is e, in increasing
// output order. The index compare decides, and only a match computes the
// output's taps (computing them for every candidate made this gather ~5x
// PyTorch's max_pool_backward_nchw on an H100: 3x3 stride 2 on
// 128x64x32x32, 0.54 ms against 0.11, 2026-11-28): a saved argmax is one of
// its output's taps unless the window has none, whose index can name e
// without e being in the window (cuda_math::routes_gradient).
template <class T>
struct MaxPoolBackward {
  const T* gy;
  const int64_t* idx;
  T* gx;
  Pool3 g;
  MINIDL_HOST_DEVICE void operator()(const Offsets<1>& off) const {
    const int64_t e = off.v[0];
    const cuda_math::ChannelSplit s = cuda_math::split_channel(e, g.step, g.by_step, g.fast);
    const cuda_math::Index4 in = input_position(g, s);
    const int64_t flat = (in.d * g.d[1].in + in.h) * g.d[2].in + in.w;
    opmath_t<T> acc = 0;
    for_each_candidate_output(g, s, in, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
      if (idx[o] == flat && cuda_math::is_tap(cuda_math::taps_of(g.d[0], od), in.d) &&
          cuda_math::is_tap(cuda_math::taps_of(g.d[1], oh), in.h) && cuda_math::is_tap(cuda_math::taps_of(g.d[2], ow), in.w))
        acc += to_opmath(gy[o]);
    });
    gx[e] = from_opmath<T>(acc);
  }
};

// Disjoint windows (stride >= window, or adaptive bins that divide the
// input; every MaxPool2d(2) of SmallNet and the UNet): each input element is
// in at most one window, so the backward zeroes gx and scatters each output's
// gradient to its saved index, a thread per output. The gather above walks
// the window geometry per input element: on an H100 it took 1.2 ms of a
// 3.7 ms SmallNet step (batch 128; PyTorch's gather, max_pool_backward_nchw,
// 0.29 ms); the scatter took 0.10 ms (2026-11-27).
template <class T>
struct MaxPoolScatter {
  const T* gy;
  const int64_t* idx;
  T* gx;
  Pool3 g;
  MINIDL_HOST_DEVICE void operator()(const Offsets<1>& off) const {
    const int64_t o = off.v[0];
    if (g.some_window_empty) {  // then ask the window (which costs divisions)
      const OutputWindow w = window_of(g, o);
      if (!cuda_math::routes_gradient(w.t[0], w.t[1], w.t[2])) return;
    }
    const cuda_math::ChannelSplit s = cuda_math::split_channel(o, g.step, g.by_step, g.fast);
    const int64_t outer = cuda_math::quotient(s.rest, g.out_plane, g.by_out_plane, g.fast);
    gx[(outer * g.in_plane + idx[o]) * g.step + s.inner] = gy[o];
  }
};

inline bool windows_disjoint(const Pool3& g) {
  return cuda_math::windows_disjoint(g.d[0]) && cuda_math::windows_disjoint(g.d[1]) &&
         cuda_math::windows_disjoint(g.d[2]);
}

template <class T>
struct AvgPoolForward {
  const T* x;
  T* y;
  Pool3 g;
  MINIDL_HOST_DEVICE void operator()(const Offsets<1>& off) const {
    const int64_t o = off.v[0];
    const OutputWindow w = window_of(g, o);
    const Taps &td = w.t[0], &th = w.t[1], &tw = w.t[2];
    if (cuda_math::empty_window(td, th, tw)) {  // PyTorch writes 0
      y[o] = from_opmath<T>(0.0);
      return;
    }
    const int64_t H = g.d[1].in, W = g.d[2].in;
    const T* xp = x + w.base;
    double s = 0.0;
    for (int64_t a = td.lo; a < td.hi; ++a)
      for (int64_t b = th.lo; b < th.hi; ++b) {
        const T* row = xp + ((tap_pos(td, a) * H + tap_pos(th, b)) * W + tw.start) * g.step;
        for (int64_t c = tw.lo; c < tw.hi; ++c) s += convert<double>(row[c * g.step]);
      }
    y[o] = convert<T>(s / cuda_math::pool_divisor(td, th, tw, g.count_include_pad, g.divisor_override));
  }
};

template <class T>
struct AvgPoolBackward {  // gx[e] = sum of gy[o] / divisor(o) (rounded to T, as the CPU) over windows holding e
  const T* gy;
  T* gx;
  Pool3 g;
  MINIDL_HOST_DEVICE void operator()(const Offsets<1>& off) const {
    const int64_t e = off.v[0];
    opmath_t<T> acc = 0;
    for_each_touching_output(g, e, [&](int64_t o, const Taps& td, const Taps& th, const Taps& tw) {
      acc += static_cast<opmath_t<T>>(convert<double>(gy[o]) /
                                      cuda_math::pool_divisor(td, th, tw, g.count_include_pad, g.divisor_override));
    });
    gx[e] = from_opmath<T>(acc);
  }
};

}  // namespace minidl::cuda_kernels::pool
