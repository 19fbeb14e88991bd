// CPU kernels of 2-D and 3-D pooling (ops/pooling.h's kernel interface): one
// OpenMP task per N*C plane (channels-last inputs: pooling_channels_last.cpp).
// Each output's window is precomputed per dimension (the taps inside the
// input, and for avg the padded extent), so window pools, dilation, ceil_mode
// and adaptive bins share one loop nest; 2-D is D = 1.
// The 2x2 (and UNet's 2x2x2) stride-2 window has its own loop (the general
// nest's data-dependent branch mispredicts on random data: a fifth of a
// SmallNet step, 15x max_pool3d's time); float32 and 16-bit windows of stride
// 1 or 2 (ResNet's 3x3 stride 2) compare 8 outputs at once. max pooling reads float16/bfloat16
// directly (comparisons in float32; the output is one of the inputs, the
// gradient summed in float32 and rounded once: what Float32Compute's widened
// copies gave, without them); avg pooling widens one plane at a time into a
// per-thread float32 plane and rounds its float32 results once (the same bits).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "minidl/core/half.h"
#include "minidl/ops/cpu/convert_half.h"
#include "minidl/ops/cpu/pool_windows.h"
#include "minidl/ops/cpu/pooling_channels_last.h"
#include "minidl/ops/cpu/sum_span.h"
#include "minidl/ops/cpu/transpose8.h"
#include "minidl/ops/cuda/pool_math.h"
#include "minidl/ops/pooling.h"

namespace minidl {

namespace {

constexpr int64_t kParallelWork = 32768;

using cpu::divisor;
using cpu::pos;
using cpu::Taps;
using cpu::WindowTaps;
using cuda_math::empty_window;

// ---- max -----------------------------------------------------------------------

// float for the 16-bit types (their math is float32), else T.
template <class T>
using Compute = std::conditional_t<is_half_v<T>, float, T>;

template <class T>
inline Compute<T> load(T v) {
  return static_cast<Compute<T>>(v);
}

// The window is x[2od..2od+1][2oh..2oh+1][2ow..2ow+1] (3-D: kernel and stride
// 2 along depth) or x[od][2oh..2oh+1][2ow..2ow+1] (2-D, and 3-D with depth
// kernel 1), all inside: no padding, no dilation, floor division. Taps in the
// general nest's order, so ties and NaNs pick the same index.
bool is_plain_2x2(const PoolGeometry& g) {
  const int64_t kd = g.kernel[0];
  return !g.adaptive && (kd == 1 || kd == 2) && g.stride[0] == kd && g.padding[0] == 0 && g.dilation[0] == 1 &&
         kd * g.out[0] <= g.in[0] && g.kernel[1] == 2 && g.kernel[2] == 2 && g.stride[1] == 2 &&
         g.stride[2] == 2 && g.padding[1] == 0 && g.padding[2] == 0 && g.dilation[1] == 1 && g.dilation[2] == 1 &&
         2 * g.out[1] <= g.in[1] && 2 * g.out[2] <= g.in[2];
}

// One output row of the window from its R input rows (2 per depth tap, in the
// nest's order; row r starts at flat index i0 + row_off[r]) (C: float or
// double). Selects, not branches: random data mispredicts them.
template <int R, class C>
void max_pool_2x2_row(const C* const (&rows)[R], const int64_t (&row_off)[R], C* y, int64_t* idx, int64_t OW,
                      int64_t i0) {
  for (int64_t ow = 0; ow < OW; ++ow) {
    // best starts at the first tap: the general nest's -inf start picks it too.
    C best = rows[0][2 * ow];
    int64_t at = row_off[0];
    for (int t = 1; t < 2 * R; ++t) {
      const C v = rows[t >> 1][2 * ow + (t & 1)];
      const bool take = (v > best) | (v != v);  // NaN propagates (the last NaN's index), as in PyTorch
      best = take ? v : best;
      at = take ? row_off[t >> 1] + (t & 1) : at;
    }
    y[ow] = best;
    idx[ow] = i0 + at + 2 * ow;
  }
}

// Rows of 16-bit values to float32 and back (the vectorized conversions;
// narrowing an exact 16-bit value gives it back).
inline void widen_row(const BFloat16* in, float* out, int64_t n) { half_convert_kernels().bf16_to_f32(in, out, n); }
inline void widen_row(const Half* in, float* out, int64_t n) { half_convert_kernels().f16_to_f32(in, out, n); }
inline void narrow_row(const float* in, BFloat16* out, int64_t n) { half_convert_kernels().f32_to_bf16(in, out, n); }
inline void narrow_row(const float* in, Half* out, int64_t n) { half_convert_kernels().f32_to_f16(in, out, n); }

// One plane; KD input slices per output slice. 16-bit planes go through float
// rows: converting is cheaper than comparing 16-bit values one by one, and
// the float row loop vectorizes.
template <int KD, class T>
void max_pool_2x2_plane(const T* xp, T* yp, int64_t* ip, const PoolGeometry& g) {
  constexpr int R = 2 * KD;
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  int64_t row_off[R];
  for (int r = 0; r < R; ++r) row_off[r] = (r >> 1) * H * W + (r & 1) * W;
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t i0 = (od * KD * H + 2 * oh) * W, o = (od * OH + oh) * OW;
      if constexpr (is_half_v<T>) {
        thread_local std::vector<float> buf;
        buf.resize(static_cast<size_t>(R * W + OW));
        const float* rows[R];
        for (int r = 0; r < R; ++r) rows[r] = buf.data() + r * W;
        for (int d = 0; d < KD; ++d) widen_row(xp + i0 + row_off[2 * d], buf.data() + 2 * d * W, 2 * W);
        float* y = buf.data() + R * W;
        max_pool_2x2_row<R>(rows, row_off, y, ip + o, OW, i0);
        narrow_row(y, yp + o, OW);  // one of the inputs: exact
      } else {
        const T* rows[R];
        for (int r = 0; r < R; ++r) rows[r] = xp + i0 + row_off[r];
        max_pool_2x2_row<R>(rows, row_off, yp + o, ip + o, OW, i0);
      }
    }
}

// 2-D float32 (and 16-bit, widened into the float rows) windows with stride
// 1 or 2 and no dilation (ResNet's 3x3 stride-2 pool): 8 outputs of a row per step. The general nest compares one
// tap at a time behind a data-dependent branch (12 cycles a tap on random
// data). Each input row is first copied into a row padded with -inf, so every
// window reads whole vectors; a -inf pad never beats the running best (which
// starts at -inf with the first inside tap's index), taps come in the general
// nest's order, and ties keep the first: the same values and indices.
bool is_vector_2d(const PoolGeometry& g) {
  return !g.adaptive && g.in[0] == 1 && g.kernel[0] == 1 && g.stride[0] == 1 && g.padding[0] == 0 &&
         g.dilation[1] == 1 && g.dilation[2] == 1 && (g.stride[2] == 1 || g.stride[2] == 2) &&
         g.in_plane() < (int64_t{1} << 31);  // indices in int32 lanes
}

template <int S, class T>
void max_pool_plane_vec(const T* xp, T* yp, int64_t* ip, const PoolGeometry& g, const WindowTaps& t) {
  using transpose8::F8;
  using transpose8::I8;
  const int64_t H = g.in[1], W = g.in[2], OW = g.out[2], k = g.kernel[2], p = g.padding[2];
  const int64_t blocks = (OW + 7) / 8;
  // Padded row q holds input column q - p; wide enough for the last block's
  // reads (load_run<2> reads 16 floats from each tap).
  const int64_t Wp = std::max(p + W, S * 8 * blocks + k);
  thread_local std::vector<float> rows;
  rows.resize(static_cast<size_t>(H * Wp));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < H; ++h) {  // the pads -inf, the input between them
    float* r = rows.data() + h * Wp;
    std::fill(r, r + p, kNegInf);
    if constexpr (is_half_v<T>)
      widen_row(xp + h * W, r + p, W);
    else
      std::copy(xp + h * W, xp + (h + 1) * W, r + p);
    std::fill(r + p + W, r + Wp, kNegInf);
  }
  const I8 lane = {0, S, 2 * S, 3 * S, 4 * S, 5 * S, 6 * S, 7 * S};
  for (int64_t oh = 0; oh < g.out[1]; ++oh) {
    const Taps& th = t.h[static_cast<size_t>(oh)];
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 8) {
      const int64_t n = std::min<int64_t>(8, OW - ow0);
      F8 best = F8{} - std::numeric_limits<float>::infinity();
      int32_t first[8];  // the first inside tap (PyTorch's index for an all -inf window)
      for (int l = 0; l < 8; ++l) {
        const Taps& tw = t.w[static_cast<size_t>(ow0 + std::min<int64_t>(l, n - 1))];
        first[l] = static_cast<int32_t>(pos(th, th.lo) * W + pos(tw, tw.lo));
      }
      I8 best_i;
      std::memcpy(&best_i, first, sizeof best_i);
      for (int64_t b = th.lo; b < th.hi; ++b) {
        const int64_t h = pos(th, b);
        const float* row = rows.data() + h * Wp + ow0 * S;
        for (int64_t c = 0; c < k; ++c) {
          const F8 v = transpose8::load_run<S>(row + c);
          const I8 i = lane + static_cast<int32_t>(h * W + ow0 * S + c - p);
          const I8 take = (v > best) | (v != v);  // NaN propagates (the last NaN's index), as in PyTorch
          best = take ? v : best;
          best_i = take ? i : best_i;
        }
      }
      for (int64_t l = 0; l < n; ++l) {
        yp[oh * OW + ow0 + l] = static_cast<T>(best[l]);  // one of the inputs: exact in T
        ip[oh * OW + ow0 + l] = best_i[l];
      }
    }
  }
}

template <class T>
void max_pool_forward_kernel(const T* x, T* y, int64_t* idx, const PoolGeometry g) {
  const int64_t H = g.in[1], W = g.in[2], in_plane = g.in_plane(), out_plane = g.out_plane();
  if (is_plain_2x2(g)) {
#pragma omp parallel for schedule(static) if (g.planes * in_plane >= kParallelWork)
    for (int64_t p = 0; p < g.planes; ++p) {
      if (g.kernel[0] == 2)
        max_pool_2x2_plane<2>(x + p * in_plane, y + p * out_plane, idx + p * out_plane, g);
      else
        max_pool_2x2_plane<1>(x + p * in_plane, y + p * out_plane, idx + p * out_plane, g);
    }
    return;
  }
  const WindowTaps t(g);
  if constexpr (std::is_same_v<Compute<T>, float>) {  // float32 and the 16-bit types (widened rows)
    if (is_vector_2d(g)) {
#pragma omp parallel for schedule(static) if (g.work(g.taps_per_output()) >= kParallelWork)
      for (int64_t p = 0; p < g.planes; ++p) {
        if (g.stride[2] == 1)
          max_pool_plane_vec<1>(x + p * in_plane, y + p * out_plane, idx + p * out_plane, g, t);
        else
          max_pool_plane_vec<2>(x + p * in_plane, y + p * out_plane, idx + p * out_plane, g, t);
      }
      return;
    }
  }
#pragma omp parallel for schedule(static) if (g.work(g.taps_per_output()) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * in_plane;
    int64_t o = p * out_plane;
    for (const Taps& td : t.d)
      for (const Taps& th : t.h)
        for (const Taps& tw : t.w) {
          // First tap inside the input: PyTorch's index when the window holds only -inf.
          int64_t best_i = (pos(td, td.lo) * H + pos(th, th.lo)) * W + pos(tw, tw.lo);
          Compute<T> best = -std::numeric_limits<Compute<T>>::infinity();
          for (int64_t a = td.lo; a < td.hi; ++a)
            for (int64_t b = th.lo; b < th.hi; ++b) {
              const int64_t row = (pos(td, a) * H + pos(th, b)) * W;
              for (int64_t c = tw.lo; c < tw.hi; ++c) {
                const int64_t i = row + pos(tw, c);
                const Compute<T> v = load(xp[i]);
                if (v > best || std::isnan(v)) {  // NaN propagates, as in PyTorch
                  best = v;
                  best_i = i;
                }
              }
            }
          y[o] = static_cast<T>(best);  // one of the inputs: exact in T
          idx[o++] = best_i;
        }
  }
}

// Routes each dy to its argmax (windows may overlap: contributions add, for
// the 16-bit types in a float32 plane rounded once); windows with no tap
// inside the input route nothing (cpu::gradient_routes).
template <class T>
void max_pool_backward_kernel(const T* gy, const int64_t* idx, T* gx, const PoolGeometry g) {
  const int64_t in_plane = g.in_plane(), out_plane = g.out_plane();
  const std::vector<uint8_t> routes = cpu::gradient_routes(WindowTaps(g));
#pragma omp parallel for schedule(static) if (g.planes * (in_plane + out_plane) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    T* gxp = gx + p * in_plane;
    const T* gyp = gy + p * out_plane;
    const int64_t* ip = idx + p * out_plane;
    if constexpr (is_half_v<T>) {
      thread_local std::vector<float> sum;
      sum.assign(static_cast<size_t>(in_plane), 0.0f);
      for (int64_t o = 0; o < out_plane; ++o)
        if (routes[static_cast<size_t>(o)]) sum[static_cast<size_t>(ip[o])] += load(gyp[o]);
      narrow_row(sum.data(), gxp, in_plane);
    } else {
      std::fill(gxp, gxp + in_plane, T(0));
      for (int64_t o = 0; o < out_plane; ++o)
        if (routes[static_cast<size_t>(o)]) gxp[ip[o]] += gyp[o];
    }
  }
}

// ---- avg -----------------------------------------------------------------------

// One plane of avg pooling in T (float or double): sums in double, the mean
// rounded once to T.
template <class T>
void avg_pool_plane(const T* xp, T* yp, const WindowTaps& t, const PoolGeometry& g) {
  const int64_t H = g.in[1], W = g.in[2];
  int64_t o = 0;
  for (const Taps& td : t.d)
    for (const Taps& th : t.h)
      for (const Taps& tw : t.w) {
        if (empty_window(td, th, tw)) {  // PyTorch writes 0
          yp[o++] = T(0);
          continue;
        }
        double s = 0.0;
        for (int64_t a = td.lo; a < td.hi; ++a)
          for (int64_t b = th.lo; b < th.hi; ++b) {
            const T* row = xp + (pos(td, a) * H + pos(th, b)) * W + tw.start;
            for (int64_t c = tw.lo; c < tw.hi; ++c) s += row[c];
          }
        yp[o++] = static_cast<T>(s / divisor(g, td, th, tw));
      }
}

// Global average pooling: float and double planes through the vectorized
// double sum (one running sum was latency-bound: 4x slower than PyTorch on
// ResNet's 28x28 planes). 16-bit values are read one by one: planes are small
// (4x4 in ResNet), where converting them row by row cost more than it saved.
// The mean is rounded to float32 first for the 16-bit types, as the widened path.
template <class T>
T global_mean(const T* xp, int64_t n) {
  double s = 0.0;
  if constexpr (is_half_v<T>) {
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(load(xp[i]));
  } else {
    s = cpu::sum_span<double>(xp, n);
  }
  return static_cast<T>(static_cast<Compute<T>>(s / static_cast<double>(n)));
}

// 16-bit planes are widened into a per-thread float plane, the float loop
// runs on it, and the float results are rounded once: the bits the float32
// kernel on widened copies gave, without the whole-tensor copies.
template <class T>
void avg_pool_forward_kernel(const T* x, T* y, const PoolGeometry g) {
  const int64_t in_plane = g.in_plane(), out_plane = g.out_plane();
  const bool global = g.adaptive && out_plane == 1;  // global average pooling: one mean per plane
  const int64_t work = global ? g.planes * in_plane : g.work(g.taps_per_output());
  const WindowTaps t(g);
#pragma omp parallel for schedule(static) if (work >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * in_plane;
    T* yp = y + p * out_plane;
    if (global) {
      yp[0] = global_mean(xp, in_plane);
    } else if constexpr (is_half_v<T>) {
      thread_local std::vector<float> buf;
      buf.resize(static_cast<size_t>(in_plane + out_plane));
      float *xf = buf.data(), *yf = xf + in_plane;
      widen_row(xp, xf, in_plane);
      avg_pool_plane(xf, yf, t, g);
      narrow_row(yf, yp, out_plane);
    } else {
      avg_pool_plane(xp, yp, t, g);
    }
  }
}

// One plane of the gradient in T: each output's dy / divisor (rounded to T)
// added to its window's taps (overwrite: the plane is zeroed first).
template <class T>
void avg_pool_backward_plane(const T* gyp, T* gxp, const WindowTaps& t, const PoolGeometry& g) {
  const int64_t H = g.in[1], W = g.in[2];
  std::fill(gxp, gxp + g.in_plane(), T(0));
  int64_t o = 0;
  for (const Taps& td : t.d)
    for (const Taps& th : t.h)
      for (const Taps& tw : t.w) {
        const int64_t oi = o++;
        if (empty_window(td, th, tw)) continue;
        const T share = static_cast<T>(gyp[oi] / divisor(g, td, th, tw));
        for (int64_t a = td.lo; a < td.hi; ++a)
          for (int64_t b = th.lo; b < th.hi; ++b) {
            T* row = gxp + (pos(td, a) * H + pos(th, b)) * W + tw.start;
            for (int64_t c = tw.lo; c < tw.hi; ++c) row[c] += share;
          }
      }
}

template <class T>
void avg_pool_backward_kernel(const T* gy, T* gx, const PoolGeometry g) {
  const int64_t in_plane = g.in_plane(), out_plane = g.out_plane();
  const bool global = g.adaptive && out_plane == 1;
  const int64_t work = global ? g.planes * in_plane : g.planes * (in_plane + g.work(g.taps_per_output()));
  const WindowTaps t(g);
#pragma omp parallel for schedule(static) if (work >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    if (global) {  // dy / n to every value (for 16-bit: rounded to float32, then to T)
      const auto share = static_cast<Compute<T>>(static_cast<double>(load(gy[p])) / static_cast<double>(in_plane));
      std::fill(gx + p * in_plane, gx + (p + 1) * in_plane, static_cast<T>(share));
    } else if constexpr (is_half_v<T>) {
      thread_local std::vector<float> buf;  // the float gradient plane, summed and rounded once
      buf.resize(static_cast<size_t>(in_plane + out_plane));
      float *gxf = buf.data(), *gyf = gxf + in_plane;
      widen_row(gy + p * out_plane, gyf, out_plane);
      avg_pool_backward_plane(gyf, gxf, t, g);
      narrow_row(gxf, gx + p * in_plane, in_plane);
    } else {
      avg_pool_backward_plane(gy + p * out_plane, gx + p * in_plane, t, g);
    }
  }
}

// ---- dispatch ------------------------------------------------------------------

// float32, float64, and float16/bfloat16 read directly.
template <class F>
void dispatch_with_half(DType dtype, const char* op, F&& f) {
  if (dtype == kBFloat16) return f(BFloat16{});
  if (dtype == kFloat16) return f(Half{});
  MINIDL_DISPATCH_FLOATING(dtype, op, [&] { f(scalar_t{}); });
}

void max_pool_forward_cpu(const Tensor& x, const Tensor& y, const Tensor& indices, const PoolGeometry& g) {
  dispatch_with_half(x.dtype(), "max_pool", [&](auto tag) {
    using T = decltype(tag);
    const auto* xp = static_cast<const T*>(x.raw_data());
    auto* yp = static_cast<T*>(y.raw_data());
    if (g.channels_last > 0) return cpu::max_pool_forward_channels_last(xp, yp, indices.data_ptr<int64_t>(), g);
    max_pool_forward_kernel(xp, yp, indices.data_ptr<int64_t>(), g);
  });
}

void max_pool_backward_cpu(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_x, const PoolGeometry& g) {
  dispatch_with_half(grad_x.dtype(), "max_pool_backward", [&](auto tag) {
    using T = decltype(tag);
    const auto* gy = static_cast<const T*>(grad_y.raw_data());
    auto* gx = static_cast<T*>(grad_x.raw_data());
    if (g.channels_last > 0) return cpu::max_pool_backward_channels_last(gy, indices.data_ptr<int64_t>(), gx, g);
    max_pool_backward_kernel(gy, indices.data_ptr<int64_t>(), gx, g);
  });
}

void avg_pool_forward_cpu(const Tensor& x, const Tensor& y, const PoolGeometry& g) {
  dispatch_with_half(x.dtype(), "avg_pool", [&](auto tag) {
    using T = decltype(tag);
    const auto* xp = static_cast<const T*>(x.raw_data());
    auto* yp = static_cast<T*>(y.raw_data());
    if (g.channels_last > 0) return cpu::avg_pool_forward_channels_last(xp, yp, g);
    avg_pool_forward_kernel(xp, yp, g);
  });
}

void avg_pool_backward_cpu(const Tensor& grad_y, const Tensor& grad_x, const PoolGeometry& g) {
  dispatch_with_half(grad_x.dtype(), "avg_pool_backward", [&](auto tag) {
    using T = decltype(tag);
    const auto* gy = static_cast<const T*>(grad_y.raw_data());
    auto* gx = static_cast<T*>(grad_x.raw_data());
    if (g.channels_last > 0) return cpu::avg_pool_backward_channels_last(gy, gx, g);
    avg_pool_backward_kernel(gy, gx, g);
  });
}

}  // namespace

void register_pooling_cpu_kernels() {
  max_pool_forward_stub.set(DeviceType::CPU, max_pool_forward_cpu);
  max_pool_backward_stub.set(DeviceType::CPU, max_pool_backward_cpu);
  avg_pool_forward_stub.set(DeviceType::CPU, avg_pool_forward_cpu);
  avg_pool_backward_stub.set(DeviceType::CPU, avg_pool_backward_cpu);
}

}  // namespace minidl
