// The windows of the CPU pooling kernels (ops/cpu/pooling.cpp, planar;
// ops/cpu/pooling_channels_last.cpp): every output's taps along D, H and W
// from ops/cuda/pool_math.h (the CUDA kernels' window math, plain division
// here), walked in memory order, and which outputs route max pooling's
// gradient. Internal to ops/cpu/.
#pragma once

#include <cstdint>
#include <vector>

#include "minidl/ops/cuda/pool_math.h"
#include "minidl/ops/pooling.h"

namespace minidl::cpu {

using cuda_math::Taps;

// The taps of every output along D, H and W.
struct WindowTaps {
  std::vector<Taps> d, h, w;
  explicit WindowTaps(const PoolGeometry& g) : d(along(g, 0)), h(along(g, 1)), w(along(g, 2)) {}
  static std::vector<Taps> along(const PoolGeometry& g, int i) {
    cuda_math::PoolDim dim;  // no dividers: plain `/` on the CPU
    dim.in = g.in[i], dim.out = g.out[i], dim.kernel = g.kernel[i], dim.stride = g.stride[i];
    dim.padding = g.padding[i], dim.dilation = g.dilation[i], dim.adaptive = g.adaptive;
    std::vector<Taps> taps(static_cast<size_t>(g.out[i]));
    for (int64_t o = 0; o < g.out[i]; ++o) taps[static_cast<size_t>(o)] = cuda_math::taps_of(dim, o);
    return taps;
  }
};

inline int64_t pos(const Taps& t, int64_t i) { return t.start + i * t.step; }

// Calls f(o, td, th, tw) for every output o of a plane, in memory order.
template <class F>
void for_each_output(const WindowTaps& t, F&& f) {
  int64_t o = 0;
  for (const Taps& td : t.d)
    for (const Taps& th : t.h)
      for (const Taps& tw : t.w) f(o++, td, th, tw);
}

// Calls f(i) for every tap position i (in the plane) of a window, in memory order.
template <class F>
void for_each_tap(const PoolGeometry& g, const Taps& td, const Taps& th, const Taps& tw, F&& f) {
  for (int64_t a = td.lo; a < td.hi; ++a)
    for (int64_t b = th.lo; b < th.hi; ++b) {
      const int64_t row = (pos(td, a) * g.in[1] + pos(th, b)) * g.in[2];
      for (int64_t c = tw.lo; c < tw.hi; ++c) f(row + pos(tw, c));
    }
}

// avg's divisor (PyTorch's rules; pool_math.h), 0 never reached: empty windows write 0.
inline double divisor(const PoolGeometry& g, const Taps& td, const Taps& th, const Taps& tw) {
  return cuda_math::pool_divisor(td, th, tw, g.count_include_pad, g.divisor_override);
}

// Per output of a plane (memory order): 1 where max pooling's gradient goes
// to the saved index, 0 for a window with no tap inside the input
// (cuda_math::routes_gradient: its index names no element of the window).
inline std::vector<uint8_t> gradient_routes(const WindowTaps& t) {
  std::vector<uint8_t> routes;
  routes.reserve(t.d.size() * t.h.size() * t.w.size());
  for_each_output(t, [&](int64_t, const Taps& td, const Taps& th, const Taps& tw) {
    routes.push_back(cuda_math::empty_window(td, th, tw) ? 0 : 1);
  });
  return routes;
}

}  // namespace minidl::cpu
