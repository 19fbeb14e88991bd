// The common case of the CUDA max-pooling kernels with 32-bit arithmetic:
// a 2-D window (not adaptive) pool whose every flat index fits 31 bits,
// planar or channels-last (elements `step` = C apart). The general functors
// of ops/cuda/pool_kernels.h compute every window in 64-bit integers through
// 3-D window math (taps_of per dimension); on an H100 their forward took 80
// registers a thread and ran at half PyTorch's speed (3x3 stride 2 on
// 128x64x32x32: 0.076 against 0.038 ms, 2026-11-28). These follow PyTorch's
// max_pool_forward_nchw / max_pool_backward_nchw: the window's bounds from
// the output position, clipped, and a plain loop. Same results as the
// general ones (scan order, NaN propagation, the saved index, the gather's
// summation order); plain C++ with MINIDL_HOST_DEVICE, so
// tests/test_cuda_pool_kernels.cpp runs them on the CPU over every index.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "minidl/ops/cuda/int_divider.h"
#include "minidl/ops/cuda/offset_calculator.h"
#include "minidl/ops/cuda/opmath.h"
#include "minidl/ops/pooling.h"

namespace minidl::cuda_kernels::pool2d {

using cuda_math::IntDivider;
using cuda_math::Offsets;
using cuda_math::opmath_t;

struct Pool2d {
  int32_t H, W, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw, step;
  IntDivider by_step, by_out_w, by_out_h, by_in_w, by_in_h, by_sh, by_sw;
};

// The geometry when g is a 2-D window pool whose flat indices (and
// positions * step) fit 31 bits, else nullopt (the general kernels run).
inline std::optional<Pool2d> fast_geometry(const PoolGeometry& g) {
  const bool two_d = g.in[0] == 1 && g.out[0] == 1 && g.kernel[0] == 1 && g.padding[0] == 0;
  if (!two_d || g.adaptive || g.planes <= 0 || g.in_plane() <= 0 || g.out_plane() <= 0) return std::nullopt;
  // The general kernels' bound (PoolDim::with_dividers): stride and dilation
  // are 32-bit divisors and steps (h < H before h += dilation), so each must
  // fit too, also where the kernel is 1 and the dilation never moves a tap.
  for (int i = 1; i < 3; ++i)
    if (g.stride[i] <= 0 || g.dilation[i] <= 0 || g.kernel[i] <= 0 || g.padding[i] < 0 ||
        g.stride[i] >= cuda_math::kIntDividerLimit || g.dilation[i] >= cuda_math::kIntDividerLimit ||
        g.in[i] + g.padding[i] + g.stride[i] + g.dilation[i] + g.kernel[i] * g.dilation[i] >=
            cuda_math::kIntDividerLimit)
      return std::nullopt;
  if (!cuda_math::fits_int_divider(g.planes * std::max(g.in_plane(), g.out_plane()))) return std::nullopt;
  Pool2d p;
  p.H = static_cast<int32_t>(g.in[1]), p.W = static_cast<int32_t>(g.in[2]);
  p.Ho = static_cast<int32_t>(g.out[1]), p.Wo = static_cast<int32_t>(g.out[2]);
  p.kh = static_cast<int32_t>(g.kernel[1]), p.kw = static_cast<int32_t>(g.kernel[2]);
  p.sh = static_cast<int32_t>(g.stride[1]), p.sw = static_cast<int32_t>(g.stride[2]);
  p.ph = static_cast<int32_t>(g.padding[1]), p.pw = static_cast<int32_t>(g.padding[2]);
  p.dh = static_cast<int32_t>(g.dilation[1]), p.dw = static_cast<int32_t>(g.dilation[2]);
  p.step = static_cast<int32_t>(g.channels_last > 0 ? g.channels_last : 1);
  p.by_step = IntDivider(p.step), p.by_out_w = IntDivider(p.Wo), p.by_out_h = IntDivider(p.Ho);
  p.by_in_w = IntDivider(p.W), p.by_in_h = IntDivider(p.H);
  p.by_sh = IntDivider(p.sh), p.by_sw = IntDivider(p.sw);
  return p;
}

MINIDL_HOST_DEVICE inline int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }

// Memory index m of a (planes or samples, rows, cols[, step]) tensor: the
// channel (0 when planar), the row, the column and the plane (the sample
// when channels-last).
struct Position {
  uint32_t inner, outer, row, col;
};

MINIDL_HOST_DEVICE inline Position position(uint32_t m, const Pool2d& p, const IntDivider& by_w, const IntDivider& by_h,
                                            int32_t w, int32_t h) {
  Position r;
  const uint32_t rest = p.step == 1 ? m : p.by_step.div(m);
  r.inner = m - rest * static_cast<uint32_t>(p.step);
  const uint32_t line = by_w.div(rest);
  r.col = rest - line * static_cast<uint32_t>(w);
  r.outer = by_h.div(line);
  r.row = line - r.outer * static_cast<uint32_t>(h);
  return r;
}

template <class T>
struct MaxPool2dForward {
  const T* x;
  T* y;
  int64_t* idx;
  Pool2d p;
  MINIDL_HOST_DEVICE void operator()(const Offsets<1>& off) const {
    const uint32_t o = static_cast<uint32_t>(off.v[0]);
    const Position q = position(o, p, p.by_out_w, p.by_out_h, p.Wo, p.Ho);
    int32_t h0 = static_cast<int32_t>(q.row) * p.sh - p.ph, w0 = static_cast<int32_t>(q.col) * p.sw - p.pw;
    const int32_t h1 = min32(h0 + (p.kh - 1) * p.dh + 1, p.H), w1 = min32(w0 + (p.kw - 1) * p.dw + 1, p.W);
    while (h0 < 0) h0 += p.dh;
    while (w0 < 0) w0 += p.dw;
    const T* xp = x + q.outer * static_cast<uint32_t>(p.H * p.W * p.step) + q.inner;
    // The first tap inside the input: PyTorch's index when all are -inf (in 64
    // bits: a window with no tap starts past the plane, maybe past 31 bits).
    int64_t best_i = static_cast<int64_t>(h0) * p.W + w0;
    opmath_t<T> best = -INFINITY;
    for (int32_t h = h0; h < h1; h += p.dh)
      for (int32_t w = w0; w < w1; w += p.dw) {
        const int32_t i = h * p.W + w;
        const opmath_t<T> v = cuda_math::to_opmath(xp[static_cast<uint32_t>(i) * static_cast<uint32_t>(p.step)]);
        if (v > best || v != v) {  // NaN propagates, as in PyTorch
          best = v;
          best_i = i;
        }
      }
    y[o] = cuda_math::from_opmath<T>(best);
    idx[o] = best_i;
  }
};

// gx[e] = sum of gy[o] over the outputs o whose window may hold e (rows and
// columns by the stride) and whose saved argmax is e, in increasing o; a
// match whose window does not hold e (dilation steps over it: the window has
// no tap, cuda_math::routes_gradient) routes nothing.
template <class T>
struct MaxPool2dBackward {
  const T* gy;
  const int64_t* idx;
  T* gx;
  Pool2d p;
  MINIDL_HOST_DEVICE void operator()(const Offsets<1>& off) const {
    const uint32_t e = static_cast<uint32_t>(off.v[0]);
    const Position q = position(e, p, p.by_in_w, p.by_in_h, p.W, p.H);
    const int32_t h = static_cast<int32_t>(q.row) + p.ph, w = static_cast<int32_t>(q.col) + p.pw;
    const int32_t span_h = (p.kh - 1) * p.dh + 1, span_w = (p.kw - 1) * p.dw + 1;
    const int32_t oh0 = h < span_h ? 0 : static_cast<int32_t>(p.by_sh.div(static_cast<uint32_t>(h - span_h))) + 1;
    const int32_t ow0 = w < span_w ? 0 : static_cast<int32_t>(p.by_sw.div(static_cast<uint32_t>(w - span_w))) + 1;
    const int32_t oh1 = min32(static_cast<int32_t>(p.by_sh.div(static_cast<uint32_t>(h))) + 1, p.Ho);
    const int32_t ow1 = min32(static_cast<int32_t>(p.by_sw.div(static_cast<uint32_t>(w))) + 1, p.Wo);
    const int64_t flat = static_cast<int64_t>(q.row) * p.W + q.col;
    const uint32_t plane = q.outer * static_cast<uint32_t>(p.Ho * p.Wo);
    opmath_t<T> acc = 0;
    for (int32_t oh = oh0; oh < oh1; ++oh)
      for (int32_t ow = ow0; ow < ow1; ++ow) {
        const uint32_t o = (plane + static_cast<uint32_t>(oh * p.Wo + ow)) * static_cast<uint32_t>(p.step) + q.inner;
        if (idx[o] == flat && (h - oh * p.sh) % p.dh == 0 && (w - ow * p.sw) % p.dw == 0)
          acc += cuda_math::to_opmath(gy[o]);
      }
    gx[e] = cuda_math::from_opmath<T>(acc);
  }
};

}  // namespace minidl::cuda_kernels::pool2d
