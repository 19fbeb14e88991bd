// CPU kernels of softmax and log_softmax (ops/softmax.h's kernel interface).
//
// The input is viewed as (outer, D, inner) with D the softmax dim; the kernels
// walk "columns" (one outer index, a few inner indices) with stride `inner`
// along D. With inner == 1 (the last dim) a column is a contiguous row.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/softmax.h"

namespace minidl {

namespace {

// Inner indices handled together by one task: enough for the compiler to
// vectorize the inner loop, small enough for stack buffers.
constexpr int64_t kColumnChunk = 64;

struct SoftmaxGeometry {
  int64_t outer = 1, dim_size = 1, inner = 1;
  int64_t numel() const { return outer * dim_size * inner; }
};

SoftmaxGeometry geometry_of(const Shape& shape, int64_t dim) {
  SoftmaxGeometry g;
  if (shape.empty()) return g;  // a 0-d tensor is one row of one element
  for (int64_t d = 0; d < dim; ++d) g.outer *= shape[d];
  g.dim_size = shape[dim];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) g.inner *= shape[d];
  return g;
}

// Runs fn(base, i0, n) for every (outer block, chunk of inner columns), where
// `base` is the element offset of column i0 at D index 0. Parallel when large.
template <class Fn>
void for_each_column_chunk(const SoftmaxGeometry& g, Fn&& fn) {
  const int64_t chunks = (g.inner + kColumnChunk - 1) / kColumnChunk;
  const int64_t tasks = g.outer * chunks;
#pragma omp parallel for schedule(static) if (g.numel() >= 32768)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / chunks;
    const int64_t i0 = (t % chunks) * kColumnChunk;
    const int64_t n = std::min(kColumnChunk, g.inner - i0);
    fn(o * g.dim_size * g.inner + i0, n);
  }
}

template <class T>
void softmax_forward_kernel(const T* x, T* y, const SoftmaxGeometry& g, bool log) {
  const int64_t D = g.dim_size, S = g.inner;
  for_each_column_chunk(g, [&](int64_t base, int64_t n) {
    const T* xc = x + base;
    T* yc = y + base;
    T mx[kColumnChunk];
    double sum[kColumnChunk];
    for (int64_t i = 0; i < n; ++i) {
      mx[i] = -std::numeric_limits<T>::infinity();
      sum[i] = 0.0;
    }
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i) mx[i] = std::max(mx[i], xc[d * S + i]);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i) {
        const T e = std::exp(xc[d * S + i] - mx[i]);
        if (!log) yc[d * S + i] = e;
        sum[i] += e;
      }
    if (log) {
      T shift[kColumnChunk];
      for (int64_t i = 0; i < n; ++i) shift[i] = mx[i] + static_cast<T>(std::log(sum[i]));
      for (int64_t d = 0; d < D; ++d)
        for (int64_t i = 0; i < n; ++i) yc[d * S + i] = xc[d * S + i] - shift[i];
    } else {
      T inv[kColumnChunk];
      for (int64_t i = 0; i < n; ++i) inv[i] = static_cast<T>(1.0 / sum[i]);
      for (int64_t d = 0; d < D; ++d)
        for (int64_t i = 0; i < n; ++i) yc[d * S + i] *= inv[i];
    }
  });
}

template <class T>
void softmax_backward_kernel(const T* gy, const T* y, T* gx, const SoftmaxGeometry& g, bool log) {
  const int64_t D = g.dim_size, S = g.inner;
  for_each_column_chunk(g, [&](int64_t base, int64_t n) {
    const T* gc = gy + base;
    const T* yc = y + base;
    T* out = gx + base;
    double acc[kColumnChunk];
    for (int64_t i = 0; i < n; ++i) acc[i] = 0.0;
    // softmax needs sum(g * y); log_softmax needs sum(g).
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i) acc[i] += log ? gc[d * S + i] : gc[d * S + i] * yc[d * S + i];
    T s[kColumnChunk];
    for (int64_t i = 0; i < n; ++i) s[i] = static_cast<T>(acc[i]);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = d * S + i;
        out[k] = log ? gc[k] - std::exp(yc[k]) * s[i] : yc[k] * (gc[k] - s[i]);
      }
  });
}

void softmax_forward_cpu(const Tensor& x, const Tensor& y, int64_t dim, bool log) {
  const SoftmaxGeometry g = geometry_of(x.shape(), dim);
  MINIDL_DISPATCH_FLOATING(x.dtype(), log ? "log_softmax" : "softmax",
                           [&] { softmax_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), g, log); });
}

void softmax_backward_cpu(const Tensor& grad_y, const Tensor& y, const Tensor& grad_x, int64_t dim, bool log) {
  const SoftmaxGeometry g = geometry_of(y.shape(), dim);
  MINIDL_DISPATCH_FLOATING(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&] {
    softmax_backward_kernel(grad_y.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), g, log);
  });
}

}  // namespace

void register_softmax_cpu_kernels() {
  softmax_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<softmax_forward_cpu, 1>::run);
  softmax_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<softmax_backward_cpu, 2>::run);
}

}  // namespace minidl
