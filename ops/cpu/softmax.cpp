// CPU kernels of softmax and log_softmax (ops/softmax.h's kernel interface).
//
// The input is viewed as (outer, D, inner) with D the softmax dim. With
// inner == 1 (the last dim) each of the outer rows is a contiguous run of D
// values (rows shorter than kShortRow go a block of rows at a time);
// otherwise the kernels walk "columns" (one outer index, up to kColumnChunk
// adjacent inner indices) with stride `inner` along D, so every step along D
// is a contiguous run of columns. exp/log use Eigen's packet math over those
// runs (ops/cpu/softmax_rows.h); the sums along D are float64, in an order
// fixed by the shape (each row or column summed by one task), so results do
// not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/cpu/softmax_rows.h"
#include "minidl/ops/softmax.h"

namespace minidl {

namespace {

using cpu::softmax_rows::add_widened;
using cpu::softmax_rows::ConstRun;
using cpu::softmax_rows::exp_for_sum;
using cpu::softmax_rows::exp_into;
using cpu::softmax_rows::kShortRow;
using cpu::softmax_rows::kShortRowsBlock;
using cpu::softmax_rows::run_max;
using cpu::softmax_rows::scale_flushed;
using cpu::softmax_rows::short_rows_exp_sums;
using cpu::softmax_rows::Run;
using cpu::softmax_rows::spread_rows;
using cpu::softmax_rows::widened_dot;
using cpu::softmax_rows::widened_sum;

// Inner indices handled together by one task (at most; stack buffers): long
// runs keep the hardware prefetchers streaming D runs at stride `inner`
// (2048 columns: fwd+bwd over dim 1 of 8x21x128x128 20% faster than 128).
constexpr int64_t kColumnChunk = 2048;

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

// Columns a task: kColumnChunk, halved (down to 128) while that leaves under
// 16 tasks. A function of the shape only, never of the thread count: a
// column's value depends on where its run starts (Eigen's packet/scalar split).
int64_t column_chunk(const SoftmaxGeometry& g) {
  int64_t chunk = kColumnChunk;
  while (chunk > 128 && g.outer * ((g.inner + chunk - 1) / chunk) < 16) chunk /= 2;
  return chunk;
}

// Runs fn(base, n) for every (outer index, chunk of n inner columns), where
// `base` is the element offset of the chunk's first column at D index 0.
// Parallel when large.
template <class Fn>
void for_each_column_chunk(const SoftmaxGeometry& g, Fn&& fn) {
  const int64_t chunk = g.inner == 1 ? 1 : column_chunk(g);
  const int64_t chunks = (g.inner + chunk - 1) / chunk;
  const int64_t tasks = g.outer * chunks;
#pragma omp parallel for schedule(static) if (g.numel() >= 32768)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / chunks;
    const int64_t i0 = (t % chunks) * chunk;
    const int64_t n = std::min(chunk, g.inner - i0);
    fn(o * g.dim_size * g.inner + i0, n);
  }
}

// Runs fn(row0, rows) over blocks of `per_block` rows (inner == 1). Parallel when large.
template <class Fn>
void for_each_row_block(const SoftmaxGeometry& g, int64_t per_block, Fn&& fn) {
  const int64_t tasks = (g.outer + per_block - 1) / per_block;
#pragma omp parallel for schedule(static) if (g.numel() >= 32768)
  for (int64_t t = 0; t < tasks; ++t) fn(t * per_block, std::min(per_block, g.outer - t * per_block));
}

// ---- short rows: inner == 1, D < kShortRow, `rows` rows of D values at once ----

template <class T>
void softmax_forward_short_rows(const T* x, T* y, int64_t rows, int64_t D, bool log) {
  const int64_t m = rows * D;
  alignas(64) T mx[kShortRowsBlock], per_row[kShortRowsBlock], spread[kShortRowsBlock];
  alignas(64) double sums[kShortRowsBlock];
  short_rows_exp_sums(x, rows, D, mx, spread, y, sums);  // spread: each value's row max
  if (log) Run<T>(y, m) = ConstRun<T>(x, m) - ConstRun<T>(spread, m);  // then minus log(sum): see softmax_forward_row
  for (int64_t r = 0; r < rows; ++r) per_row[r] = static_cast<T>(log ? sums[r] : 1.0 / sums[r]);
  if (log) Run<T>(per_row, rows) = Run<T>(per_row, rows).log();  // vectorized: a scalar log a row cost 30%
  spread_rows(per_row, rows, D, spread);
  if (log) Run<T>(y, m) = Run<T>(y, m) - ConstRun<T>(spread, m);
  else scale_flushed(y, m, spread, 1);
}

template <class T>
void softmax_backward_short_rows(const T* g, const T* y, T* gx, int64_t rows, int64_t D, bool log) {
  const int64_t m = rows * D;
  alignas(64) T s[kShortRowsBlock], spread[kShortRowsBlock];
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;  // softmax: sum(g * y); log_softmax: sum(g)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t k = r * D + d;
      acc += static_cast<double>(log ? g[k] : g[k] * y[k]);
    }
    s[r] = static_cast<T>(acc);
  }
  spread_rows(s, rows, D, spread);
  if (log) {
    exp_into(gx, m, ConstRun<T>(y, m));
    Run<T>(gx, m) = ConstRun<T>(g, m) - Run<T>(gx, m) * ConstRun<T>(spread, m);
  } else {
    Run<T>(gx, m) = ConstRun<T>(y, m) * (ConstRun<T>(g, m) - ConstRun<T>(spread, m));
  }
}

// ---- rows: inner == 1, softmax over a contiguous run of D values ----

template <class T>
void softmax_forward_row(const T* x, T* y, int64_t D, bool log) {
  const T mx = run_max(x, D);
  exp_for_sum(y, D, ConstRun<T>(x, D) - mx);
  const double sum = widened_sum(y, D);
  if (log) {
    // (x - max) - log(sum), as PyTorch: x - (max + log(sum)) rounded the
    // shift to the input's precision, losing digits in proportion to the max
    // (a row of -1e9 gave 0, not -log(D)).
    const T log_sum = static_cast<T>(std::log(sum));
    Run<T>(y, D) = (ConstRun<T>(x, D) - mx) - log_sum;
  } else {
    const T inv = static_cast<T>(1.0 / sum);
    scale_flushed(y, D, &inv, 0);
  }
}

template <class T>
void softmax_backward_row(const T* g, const T* y, T* gx, int64_t D, bool log) {
  if (log) {
    const T s = static_cast<T>(widened_sum(g, D));
    exp_into(gx, D, ConstRun<T>(y, D));
    Run<T>(gx, D) = ConstRun<T>(g, D) - Run<T>(gx, D) * s;
  } else {
    const T s = static_cast<T>(widened_dot(g, y, D));
    Run<T>(gx, D) = ConstRun<T>(y, D) * (ConstRun<T>(g, D) - s);
  }
}

// ---- columns: inner > 1, n adjacent columns of D values at stride S ----

template <class T>
void softmax_forward_columns(const T* xc, T* yc, int64_t D, int64_t S, int64_t n, bool log) {
  alignas(64) T mx[kColumnChunk];
  alignas(64) double sum[kColumnChunk];
  for (int64_t i = 0; i < n; ++i) {
    mx[i] = -std::numeric_limits<T>::infinity();
    sum[i] = 0.0;
  }
  for (int64_t d = 0; d < D; ++d) Run<T>(mx, n) = Run<T>(mx, n).max(ConstRun<T>(xc + d * S, n));
  for (int64_t d = 0; d < D; ++d) {
    exp_for_sum(yc + d * S, n, ConstRun<T>(xc + d * S, n) - ConstRun<T>(mx, n));
    add_widened(sum, yc + d * S, n);
  }
  alignas(64) T scale[kColumnChunk];  // log: log(sum), after the max (see softmax_forward_row); softmax: 1 / sum
  if (log) {
    for (int64_t i = 0; i < n; ++i) scale[i] = static_cast<T>(sum[i]);
    Run<T>(scale, n) = Run<T>(scale, n).log();  // vectorized: a scalar log a column cost 30%
    for (int64_t d = 0; d < D; ++d)
      Run<T>(yc + d * S, n) = (ConstRun<T>(xc + d * S, n) - ConstRun<T>(mx, n)) - ConstRun<T>(scale, n);
  } else {
    for (int64_t i = 0; i < n; ++i) scale[i] = static_cast<T>(1.0 / sum[i]);
    for (int64_t d = 0; d < D; ++d) scale_flushed(yc + d * S, n, scale, 1);
  }
}

template <class T>
void softmax_backward_columns(const T* gc, const T* yc, T* out, int64_t D, int64_t S, int64_t n, bool log) {
  alignas(64) double acc[kColumnChunk];
  for (int64_t i = 0; i < n; ++i) acc[i] = 0.0;
  // softmax needs sum(g * y); log_softmax needs sum(g).
  if (log)
    for (int64_t d = 0; d < D; ++d) add_widened(acc, gc + d * S, n);
  else
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(gc[d * S + i] * yc[d * S + i]);
  alignas(64) T s[kColumnChunk];
  for (int64_t i = 0; i < n; ++i) s[i] = static_cast<T>(acc[i]);
  const ConstRun<T> sums(s, n);
  for (int64_t d = 0; d < D; ++d) {
    const int64_t k = d * S;
    if (log) {
      exp_into(out + k, n, ConstRun<T>(yc + k, n));
      Run<T>(out + k, n) = ConstRun<T>(gc + k, n) - Run<T>(out + k, n) * sums;
    } else {
      Run<T>(out + k, n) = ConstRun<T>(yc + k, n) * (ConstRun<T>(gc + k, n) - sums);
    }
  }
}

template <class T>
void softmax_forward_kernel(const T* x, T* y, const SoftmaxGeometry& g, bool log) {
  const int64_t D = g.dim_size;
  if (g.inner == 1 && D < kShortRow) {
    for_each_row_block(g, kShortRowsBlock / D, [&](int64_t row0, int64_t rows) {
      softmax_forward_short_rows(x + row0 * D, y + row0 * D, rows, D, log);
    });
    return;
  }
  for_each_column_chunk(g, [&](int64_t base, int64_t n) {
    if (g.inner == 1) softmax_forward_row(x + base, y + base, D, log);
    else softmax_forward_columns(x + base, y + base, D, g.inner, n, log);
  });
}

template <class T>
void softmax_backward_kernel(const T* gy, const T* y, T* gx, const SoftmaxGeometry& g, bool log) {
  const int64_t D = g.dim_size;
  if (g.inner == 1 && D < kShortRow) {
    for_each_row_block(g, kShortRowsBlock / D, [&](int64_t row0, int64_t rows) {
      softmax_backward_short_rows(gy + row0 * D, y + row0 * D, gx + row0 * D, rows, D, log);
    });
    return;
  }
  for_each_column_chunk(g, [&](int64_t base, int64_t n) {
    if (g.inner == 1) softmax_backward_row(gy + base, y + base, gx + base, D, log);
    else softmax_backward_columns(gy + base, y + base, gx + base, D, g.inner, n, log);
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
