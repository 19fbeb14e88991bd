// CPU kernels of interpolate (ops/interpolate.h's kernel interface): the
// source index (and linear weight) of every output coordinate is computed once
// per dimension with PyTorch's formulas, in its precision (float for nearest,
// the tensor's type for linear); then one OpenMP task per N*C plane.
#include <algorithm>
#include <cmath>
#include <vector>

#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/interpolate.h"

namespace minidl {

namespace {

constexpr int64_t kParallelWork = 32768;

// Output coordinate -> x[i0] * l0 + x[i1] * l1 (nearest: l0 = 1, l1 = 0, i1 = i0).
template <class T>
struct Tap {
  int64_t i0, i1;
  T l0, l1;
};

// PyTorch's compute_scales_value: 1/scale_factor when one was given, else in/out.
template <class S>
S source_scale(double scale, int64_t in, int64_t out) {
  return scale > 0 ? static_cast<S>(1.0 / scale) : static_cast<S>(in) / static_cast<S>(out);
}

template <class T>
std::vector<Tap<T>> taps_along(const UpsampleGeometry& g, int dim) {
  const int64_t in = g.in[dim], out = g.out[dim];
  std::vector<Tap<T>> taps(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    Tap<T>& t = taps[static_cast<size_t>(o)];
    if (g.mode != UpsampleMode::Linear) {  // PyTorch's nearest_idx / nearest_exact_idx
      int64_t src;
      if (g.mode == UpsampleMode::Nearest && out == in) {
        src = o;
      } else if (g.mode == UpsampleMode::Nearest && out == 2 * in) {
        src = o >> 1;
      } else {
        const float scale = source_scale<float>(g.scales[dim], in, out);
        const float at = g.mode == UpsampleMode::Nearest ? static_cast<float>(o) * scale
                                                          : (static_cast<float>(o) + 0.5f) * scale;
        src = std::min(static_cast<int64_t>(std::floor(at)), in - 1);
      }
      t = {src, src, T(1), T(0)};
      continue;
    }
    if (out == in) {  // PyTorch copies
      t = {o, o, T(1), T(0)};
      continue;
    }
    // area_pixel_compute_scale / _source_index, then guard_index_and_lambda.
    const T scale = g.align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                                    : source_scale<T>(g.scales[dim], in, out);
    T src = g.align_corners ? scale * static_cast<T>(o) : scale * (static_cast<T>(o) + T(0.5)) - T(0.5);
    if (!g.align_corners && src < 0) src = 0;
    t.i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    t.l1 = std::min(std::max(src - static_cast<T>(t.i0), T(0)), T(1));
    t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
    t.l0 = T(1) - t.l1;
  }
  return taps;
}

template <class T>
struct VolumeTaps {
  std::vector<Tap<T>> d, h, w;
  explicit VolumeTaps(const UpsampleGeometry& g) : d(taps_along<T>(g, 0)), h(taps_along<T>(g, 1)), w(taps_along<T>(g, 2)) {}
};

template <class T>
void upsample_forward_kernel(const T* x, T* y, const UpsampleGeometry g) {
  const VolumeTaps<T> t(g);
  const int64_t H = g.in[1], W = g.in[2], in_plane = g.in_plane(), out_plane = g.out_plane();
  const bool linear = g.mode == UpsampleMode::Linear;
#pragma omp parallel for schedule(static) if (g.planes * out_plane * (linear ? 8 : 1) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * in_plane;
    T* yp = y + p * out_plane;
    for (const Tap<T>& td : t.d)
      for (const Tap<T>& th : t.h) {
        if (!linear) {
          const T* row = xp + (td.i0 * H + th.i0) * W;
          for (const Tap<T>& tw : t.w) *yp++ = row[tw.i0];
          continue;
        }
        // The (d, h) rows this output row blends; a zero-weight tap is skipped.
        const T* rows[4];
        T weights[4];
        int n = 0;
        for (int a = 0; a < 2; ++a) {
          const T wd = a ? td.l1 : td.l0;
          if (wd == T(0)) continue;
          for (int b = 0; b < 2; ++b) {
            const T wh = b ? th.l1 : th.l0;
            if (wh == T(0)) continue;
            rows[n] = xp + ((a ? td.i1 : td.i0) * H + (b ? th.i1 : th.i0)) * W;
            weights[n++] = wd * wh;
          }
        }
        for (const Tap<T>& tw : t.w) {
          T s = 0;
          for (int k = 0; k < n; ++k) s += weights[k] * (tw.l0 * rows[k][tw.i0] + tw.l1 * rows[k][tw.i1]);
          *yp++ = s;
        }
      }
  }
}

template <class T>
void upsample_backward_kernel(const T* gy, T* gx, const UpsampleGeometry g) {
  const VolumeTaps<T> t(g);
  const int64_t H = g.in[1], W = g.in[2], in_plane = g.in_plane(), out_plane = g.out_plane();
#pragma omp parallel for schedule(static) if (g.planes * (in_plane + out_plane * 8) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    T* gxp = gx + p * in_plane;
    const T* gyp = gy + p * out_plane;
    std::fill(gxp, gxp + in_plane, T(0));
    for (const Tap<T>& td : t.d)
      for (const Tap<T>& th : t.h) {
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            const T wdh = (a ? td.l1 : td.l0) * (b ? th.l1 : th.l0);
            if (wdh == T(0)) continue;  // nearest: only (0, 0)
            T* row = gxp + ((a ? td.i1 : td.i0) * H + (b ? th.i1 : th.i0)) * W;
            const T* gyr = gyp;
            for (const Tap<T>& tw : t.w) {
              const T v = wdh * *gyr++;
              row[tw.i0] += tw.l0 * v;
              if (tw.l1 != T(0)) row[tw.i1] += tw.l1 * v;
            }
          }
        gyp += g.out[2];  // next output row
      }
  }
}

void upsample_forward_cpu(const Tensor& x, const Tensor& y, const UpsampleGeometry& g) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "upsample",
                           [&] { upsample_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), g); });
}

void upsample_backward_cpu(const Tensor& grad_y, const Tensor& grad_x, const UpsampleGeometry& g) {
  MINIDL_DISPATCH_FLOATING(grad_x.dtype(), "upsample_backward", [&] {
    upsample_backward_kernel(grad_y.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), g);
  });
}

}  // namespace

void register_interpolate_cpu_kernels() {
  upsample_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<upsample_forward_cpu, 1>::run);
  upsample_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<upsample_backward_cpu, 1>::run);
}

}  // namespace minidl
