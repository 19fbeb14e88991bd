// CPU kernels of 2-D pooling (ops/pooling.h's kernel interface): one
// OpenMP task per N*C plane, windows clipped to the input.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "minidl/ops/pooling.h"

namespace minidl {

namespace {

constexpr int64_t kParallelWork = 32768;

// PyTorch's adaptive bins.
inline int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
inline int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

// ---- kernels -------------------------------------------------------------------

// Max over rows [h0, h1) x cols [w0, w1) of one plane; NaN propagates as in PyTorch.
template <class T>
inline void window_max(const T* xp, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1, T* out, int64_t* index) {
  T best = -std::numeric_limits<T>::infinity();
  int64_t best_i = h0 * W + w0;
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w) {
      const T v = xp[h * W + w];
      if (v > best || std::isnan(v)) {
        best = v;
        best_i = h * W + w;
      }
    }
  *out = best;
  *index = best_i;
}

template <class T>
void max_pool2d_forward_kernel(const T* x, T* y, int64_t* idx, const Pool2dGeometry g) {
#pragma omp parallel for schedule(static) if (g.work(g.kH * g.kW) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * g.H * g.W;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const int64_t hs = oh * g.sH - g.pH;
      const int64_t h0 = std::max<int64_t>(hs, 0), h1 = std::min(hs + g.kH, g.H);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t ws = ow * g.sW - g.pW;
        const int64_t w0 = std::max<int64_t>(ws, 0), w1 = std::min(ws + g.kW, g.W);
        const int64_t o = (p * g.OH + oh) * g.OW + ow;
        window_max(xp, g.W, h0, h1, w0, w1, y + o, idx + o);
      }
    }
  }
}

template <class T>
void adaptive_max_pool2d_forward_kernel(const T* x, T* y, int64_t* idx, const Pool2dGeometry g) {
  const int64_t bin =
      ((g.H + g.OH - 1) / std::max<int64_t>(g.OH, 1) + 1) * ((g.W + g.OW - 1) / std::max<int64_t>(g.OW, 1) + 1);
#pragma omp parallel for schedule(static) if (g.work(bin) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * g.H * g.W;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const int64_t h0 = bin_start(oh, g.H, g.OH), h1 = bin_end(oh, g.H, g.OH);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t w0 = bin_start(ow, g.W, g.OW), w1 = bin_end(ow, g.W, g.OW);
        const int64_t o = (p * g.OH + oh) * g.OW + ow;
        window_max(xp, g.W, h0, h1, w0, w1, y + o, idx + o);
      }
    }
  }
}

// Shared by max_pool2d and adaptive_max_pool2d: routes each dy to its argmax.
template <class T>
void max_pool2d_backward_kernel(const T* gy, const int64_t* idx, T* gx, const Pool2dGeometry g) {
  const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
#pragma omp parallel for schedule(static) if (g.planes * (in_plane + out_plane) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    T* gxp = gx + p * in_plane;
    std::fill(gxp, gxp + in_plane, T(0));
    for (int64_t o = p * out_plane; o < (p + 1) * out_plane; ++o) gxp[idx[o]] += gy[o];
  }
}

// The averaging window of output (oh, ow), clipped to the input, and its divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
};

inline AvgWindow avg_window(const Pool2dGeometry& g, bool adaptive, bool count_include_pad, int64_t oh, int64_t ow) {
  if (adaptive) {
    AvgWindow win{bin_start(oh, g.H, g.OH), bin_end(oh, g.H, g.OH), bin_start(ow, g.W, g.OW), bin_end(ow, g.W, g.OW),
                  0.0};
    win.divisor = static_cast<double>((win.h1 - win.h0) * (win.w1 - win.w0));
    return win;
  }
  int64_t h0 = oh * g.sH - g.pH, w0 = ow * g.sW - g.pW;
  int64_t h1 = std::min(h0 + g.kH, g.H + g.pH), w1 = std::min(w0 + g.kW, g.W + g.pW);
  const int64_t padded_area = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.H);
  w1 = std::min(w1, g.W);
  const int64_t area = count_include_pad ? padded_area : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, static_cast<double>(area)};
}

template <class T>
void avg_pool2d_forward_kernel(const T* x, T* y, const Pool2dGeometry g, bool adaptive, bool count_include_pad) {
  if (adaptive && g.OH == 1 && g.OW == 1) {  // global average pooling: one mean per plane
    const int64_t n = g.H * g.W;
#pragma omp parallel for schedule(static) if (g.planes * n >= kParallelWork)
    for (int64_t p = 0; p < g.planes; ++p) {
      const T* xp = x + p * n;
      double s = 0.0;
      for (int64_t i = 0; i < n; ++i) s += xp[i];
      y[p] = static_cast<T>(s / static_cast<double>(n));
    }
    return;
  }
  const int64_t per_output =
      adaptive ? (g.H / std::max<int64_t>(g.OH, 1) + 1) * (g.W / std::max<int64_t>(g.OW, 1) + 1) : g.kH * g.kW;
#pragma omp parallel for schedule(static) if (g.work(per_output) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * g.H * g.W;
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const AvgWindow win = avg_window(g, adaptive, count_include_pad, oh, ow);
        double s = 0.0;
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) s += xp[h * g.W + w];
        y[(p * g.OH + oh) * g.OW + ow] = static_cast<T>(s / win.divisor);
      }
  }
}

template <class T>
void avg_pool2d_backward_kernel(const T* gy, T* gx, const Pool2dGeometry g, bool adaptive, bool count_include_pad) {
  const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
  if (adaptive && g.OH == 1 && g.OW == 1) {
#pragma omp parallel for schedule(static) if (g.planes * in_plane >= kParallelWork)
    for (int64_t p = 0; p < g.planes; ++p)
      std::fill(gx + p * in_plane, gx + (p + 1) * in_plane, static_cast<T>(gy[p] / static_cast<double>(in_plane)));
    return;
  }
#pragma omp parallel for schedule(static) if (g.planes * (in_plane + out_plane * g.kH * g.kW) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    T* gxp = gx + p * in_plane;
    std::fill(gxp, gxp + in_plane, T(0));
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const AvgWindow win = avg_window(g, adaptive, count_include_pad, oh, ow);
        const T share = static_cast<T>(gy[(p * g.OH + oh) * g.OW + ow] / win.divisor);
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) gxp[h * g.W + w] += share;
      }
  }
}

void max_pool2d_forward_cpu(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dGeometry& g,
                            bool adaptive) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), adaptive ? "adaptive_max_pool2d" : "max_pool2d", [&] {
    if (adaptive)
      adaptive_max_pool2d_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(),
                                         g);
    else
      max_pool2d_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), g);
  });
}

void max_pool2d_backward_cpu(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_x,
                             const Pool2dGeometry& g) {
  MINIDL_DISPATCH_FLOATING(grad_x.dtype(), "max_pool2d_backward", [&] {
    max_pool2d_backward_kernel(grad_y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), grad_x.data_ptr<scalar_t>(),
                               g);
  });
}

void avg_pool2d_forward_cpu(const Tensor& x, const Tensor& y, const Pool2dGeometry& g, bool adaptive,
                            bool count_include_pad) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), adaptive ? "adaptive_avg_pool2d" : "avg_pool2d", [&] {
    avg_pool2d_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), g, adaptive, count_include_pad);
  });
}

void avg_pool2d_backward_cpu(const Tensor& grad_y, const Tensor& grad_x, const Pool2dGeometry& g, bool adaptive,
                             bool count_include_pad) {
  MINIDL_DISPATCH_FLOATING(grad_x.dtype(), "avg_pool2d_backward", [&] {
    avg_pool2d_backward_kernel(grad_y.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), g, adaptive,
                               count_include_pad);
  });
}

}  // namespace

void register_pooling_cpu_kernels() {
  max_pool2d_forward_stub.set(DeviceType::CPU, max_pool2d_forward_cpu);
  max_pool2d_backward_stub.set(DeviceType::CPU, max_pool2d_backward_cpu);
  avg_pool2d_forward_stub.set(DeviceType::CPU, avg_pool2d_forward_cpu);
  avg_pool2d_backward_stub.set(DeviceType::CPU, avg_pool2d_backward_cpu);
}

}  // namespace minidl
