// CPU kernels of 2-D and 3-D pooling (ops/pooling.h's kernel interface): one
// OpenMP task per N*C plane. Each output's window is precomputed per dimension
// (the taps inside the input, and for avg the padded extent), so window pools,
// dilation, ceil_mode and adaptive bins share one loop nest; 2-D is D = 1.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/pooling.h"

namespace minidl {

namespace {

constexpr int64_t kParallelWork = 32768;

// Taps pos = start + i*step for i in [lo, hi) lie inside the input; `padded` is
// the window's extent clipped to the padded input (avg's count_include_pad divisor).
struct Taps {
  int64_t start, lo, hi, step, padded;
};

// One Taps per output index along dimension `dim` of g.
std::vector<Taps> taps_along(const PoolGeometry& g, int dim) {
  const int64_t in = g.in[dim], k = g.kernel[dim], s = g.stride[dim], p = g.padding[dim], dil = g.dilation[dim];
  std::vector<Taps> taps(static_cast<size_t>(g.out[dim]));
  for (int64_t o = 0; o < g.out[dim]; ++o) {
    Taps& t = taps[static_cast<size_t>(o)];
    if (g.adaptive) {  // PyTorch's bins [floor(o*in/out), ceil((o+1)*in/out))
      const int64_t b0 = (o * in) / g.out[dim], b1 = ((o + 1) * in + g.out[dim] - 1) / g.out[dim];
      t = {b0, 0, b1 - b0, 1, b1 - b0};
      continue;
    }
    t.start = o * s - p;
    t.step = dil;
    t.lo = t.start < 0 ? (-t.start + dil - 1) / dil : 0;
    t.hi = std::max(t.lo, std::min(k, (in - t.start + dil - 1) / dil));
    t.padded = std::min(t.start + k, in + p) - t.start;  // avg has dilation 1
  }
  return taps;
}

struct PlaneTaps {
  std::vector<Taps> d, h, w;
  explicit PlaneTaps(const PoolGeometry& g) : d(taps_along(g, 0)), h(taps_along(g, 1)), w(taps_along(g, 2)) {}
};

inline int64_t pos(const Taps& t, int64_t i) { return t.start + i * t.step; }

// Rough taps per output, for the parallel threshold.
int64_t taps_per_output(const PoolGeometry& g) {
  if (!g.adaptive) return g.kernel[0] * g.kernel[1] * g.kernel[2];
  int64_t n = 1;
  for (int i = 0; i < 3; ++i) n *= g.in[i] / std::max<int64_t>(g.out[i], 1) + 1;
  return n;
}

// ---- max -----------------------------------------------------------------------

template <class T>
void max_pool_forward_kernel(const T* x, T* y, int64_t* idx, const PoolGeometry g) {
  const PlaneTaps t(g);
  const int64_t H = g.in[1], W = g.in[2], in_plane = g.in_plane(), out_plane = g.out_plane();
#pragma omp parallel for schedule(static) if (g.work(taps_per_output(g)) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * in_plane;
    int64_t o = p * out_plane;
    for (const Taps& td : t.d)
      for (const Taps& th : t.h)
        for (const Taps& tw : t.w) {
          // First tap inside the input: PyTorch's index when the window holds only -inf.
          int64_t best_i = (pos(td, td.lo) * H + pos(th, th.lo)) * W + pos(tw, tw.lo);
          T best = -std::numeric_limits<T>::infinity();
          for (int64_t a = td.lo; a < td.hi; ++a)
            for (int64_t b = th.lo; b < th.hi; ++b) {
              const int64_t row = (pos(td, a) * H + pos(th, b)) * W;
              for (int64_t c = tw.lo; c < tw.hi; ++c) {
                const int64_t i = row + pos(tw, c);
                const T v = xp[i];
                if (v > best || std::isnan(v)) {  // NaN propagates, as in PyTorch
                  best = v;
                  best_i = i;
                }
              }
            }
          y[o] = best;
          idx[o++] = best_i;
        }
  }
}

// Routes each dy to its argmax (windows may overlap: contributions add).
template <class T>
void max_pool_backward_kernel(const T* gy, const int64_t* idx, T* gx, const PoolGeometry g) {
  const int64_t in_plane = g.in_plane(), out_plane = g.out_plane();
#pragma omp parallel for schedule(static) if (g.planes * (in_plane + out_plane) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    T* gxp = gx + p * in_plane;
    std::fill(gxp, gxp + in_plane, T(0));
    for (int64_t o = p * out_plane; o < (p + 1) * out_plane; ++o) gxp[idx[o]] += gy[o];
  }
}

// ---- avg -----------------------------------------------------------------------

// PyTorch's divisor: divisor_override, else the window clipped to the padded input
// (count_include_pad) or to the input. 0 only for an empty window (output 0).
inline double divisor(const PoolGeometry& g, const Taps& td, const Taps& th, const Taps& tw) {
  if (g.divisor_override != 0) return static_cast<double>(g.divisor_override);
  if (g.count_include_pad) return static_cast<double>(td.padded * th.padded * tw.padded);
  return static_cast<double>((td.hi - td.lo) * (th.hi - th.lo) * (tw.hi - tw.lo));
}

inline bool empty_window(const Taps& td, const Taps& th, const Taps& tw) {
  return td.hi <= td.lo || th.hi <= th.lo || tw.hi <= tw.lo;
}

template <class T>
void avg_pool_forward_kernel(const T* x, T* y, const PoolGeometry g) {
  const int64_t in_plane = g.in_plane(), out_plane = g.out_plane();
  if (g.adaptive && out_plane == 1) {  // global average pooling: one mean per plane
#pragma omp parallel for schedule(static) if (g.planes * in_plane >= kParallelWork)
    for (int64_t p = 0; p < g.planes; ++p) {
      const T* xp = x + p * in_plane;
      double s = 0.0;
      for (int64_t i = 0; i < in_plane; ++i) s += xp[i];
      y[p] = static_cast<T>(s / static_cast<double>(in_plane));
    }
    return;
  }
  const PlaneTaps t(g);
  const int64_t H = g.in[1], W = g.in[2];
#pragma omp parallel for schedule(static) if (g.work(taps_per_output(g)) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * in_plane;
    int64_t o = p * out_plane;
    for (const Taps& td : t.d)
      for (const Taps& th : t.h)
        for (const Taps& tw : t.w) {
          if (empty_window(td, th, tw)) {  // PyTorch writes 0
            y[o++] = T(0);
            continue;
          }
          double s = 0.0;
          for (int64_t a = td.lo; a < td.hi; ++a)
            for (int64_t b = th.lo; b < th.hi; ++b) {
              const T* row = xp + (pos(td, a) * H + pos(th, b)) * W + tw.start;
              for (int64_t c = tw.lo; c < tw.hi; ++c) s += row[c];
            }
          y[o++] = static_cast<T>(s / divisor(g, td, th, tw));
        }
  }
}

template <class T>
void avg_pool_backward_kernel(const T* gy, T* gx, const PoolGeometry g) {
  const int64_t in_plane = g.in_plane(), out_plane = g.out_plane();
  if (g.adaptive && out_plane == 1) {
#pragma omp parallel for schedule(static) if (g.planes * in_plane >= kParallelWork)
    for (int64_t p = 0; p < g.planes; ++p)
      std::fill(gx + p * in_plane, gx + (p + 1) * in_plane, static_cast<T>(gy[p] / static_cast<double>(in_plane)));
    return;
  }
  const PlaneTaps t(g);
  const int64_t H = g.in[1], W = g.in[2];
#pragma omp parallel for schedule(static) if (g.planes * (in_plane + g.work(taps_per_output(g))) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    T* gxp = gx + p * in_plane;
    std::fill(gxp, gxp + in_plane, T(0));
    int64_t o = p * out_plane;
    for (const Taps& td : t.d)
      for (const Taps& th : t.h)
        for (const Taps& tw : t.w) {
          const int64_t oi = o++;
          if (empty_window(td, th, tw)) continue;
          const T share = static_cast<T>(gy[oi] / divisor(g, td, th, tw));
          for (int64_t a = td.lo; a < td.hi; ++a)
            for (int64_t b = th.lo; b < th.hi; ++b) {
              T* row = gxp + (pos(td, a) * H + pos(th, b)) * W + tw.start;
              for (int64_t c = tw.lo; c < tw.hi; ++c) row[c] += share;
            }
        }
  }
}

// ---- dispatch ------------------------------------------------------------------

void max_pool_forward_cpu(const Tensor& x, const Tensor& y, const Tensor& indices, const PoolGeometry& g) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "max_pool", [&] {
    max_pool_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), g);
  });
}

void max_pool_backward_cpu(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_x, const PoolGeometry& g) {
  MINIDL_DISPATCH_FLOATING(grad_x.dtype(), "max_pool_backward", [&] {
    max_pool_backward_kernel(grad_y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), grad_x.data_ptr<scalar_t>(),
                             g);
  });
}

void avg_pool_forward_cpu(const Tensor& x, const Tensor& y, const PoolGeometry& g) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "avg_pool",
                           [&] { avg_pool_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), g); });
}

void avg_pool_backward_cpu(const Tensor& grad_y, const Tensor& grad_x, const PoolGeometry& g) {
  MINIDL_DISPATCH_FLOATING(grad_x.dtype(), "avg_pool_backward", [&] {
    avg_pool_backward_kernel(grad_y.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), g);
  });
}

}  // namespace

void register_pooling_cpu_kernels() {
  max_pool_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<max_pool_forward_cpu, 1>::run);
  max_pool_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<max_pool_backward_cpu, 2>::run);
  avg_pool_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<avg_pool_forward_cpu, 1>::run);
  avg_pool_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<avg_pool_backward_cpu, 1>::run);
}

}  // namespace minidl
