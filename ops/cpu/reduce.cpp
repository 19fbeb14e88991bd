// CPU kernels of the reductions (ops/reduce.h's kernel interface). Rows (as
// ops/reduce.cpp lays them out) are cut into fixed-size chunks reduced in
// parallel and combined in order, so results do not depend on the thread
// count. Sums of an [A, R, B] block (B > 1) accumulate whole output rows
// instead. Contiguous float32 runs add groups of 256 values pairwise in
// float32, then in double (ops/cpu/sum_float.h: within ~4 float32 ulps of
// sum |x|); column sums accumulate float32 in double; var is two-pass with a
// compensation term.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/cpu/strided_loop.h"
#include "minidl/ops/cpu/sum_span.h"
#include "minidl/ops/reduce.h"

namespace minidl {

namespace {

constexpr int64_t kParallelNumel = 32768;

// ---- CPU kernels on raw pointers ------------------------------------------------

// Integer sums wrap around as PyTorch's (two's complement): they add in
// uint64_t, where overflow is defined, and are read back as int64_t.
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

template <class Acc>
auto signed_value(Acc a) {
  if constexpr (std::is_unsigned_v<Acc>)
    return static_cast<int64_t>(a);
  else
    return a;
}

// Reduces every row of L: partial(row, begin, end) on chunks of L.chunk_len
// elements, combined left to right per row, then finish(row, result). Chunks
// run in memory order (chunk-major when a row's segments lie further apart
// than the rows do).
template <class P, class PartialFn, class CombineFn, class FinishFn>
void reduce_rows(const RowLayout& L, PartialFn partial, CombineFn combine, FinishFn finish) {
  const int64_t rows = L.rows, len = L.len, step = std::max<int64_t>(1, L.chunk_len);
  const int64_t chunks = std::max<int64_t>(1, (len + step - 1) / step);
  if (chunks == 1) {
#pragma omp parallel for schedule(static) if (rows * len >= kParallelNumel)
    for (int64_t r = 0; r < rows; ++r) finish(r, partial(r, 0, len));
    return;
  }
  std::vector<P> parts(static_cast<size_t>(rows * chunks));  // [row][chunk]
#pragma omp parallel for schedule(static) if (rows * len >= kParallelNumel)
  for (int64_t i = 0; i < rows * chunks; ++i) {
    const int64_t r = L.chunk_major ? i % rows : i / chunks;
    const int64_t c = L.chunk_major ? i / rows : i % chunks;
    parts[r * chunks + c] = partial(r, c * step, std::min(len, (c + 1) * step));
  }
#pragma omp parallel for schedule(static) if (rows * chunks >= kParallelNumel)
  for (int64_t r = 0; r < rows; ++r) {
    P acc = parts[r * chunks];
    for (int64_t c = 1; c < chunks; ++c) acc = combine(acc, parts[r * chunks + c]);
    finish(r, acc);
  }
}

using cpu::sum_span;

// Calls f(pointer, first element index, count) for the contiguous pieces of
// elements [b, e) of row r.
template <class T, class F>
void for_each_piece(const T* base, const RowLayout& L, int64_t r, int64_t b, int64_t e, F&& f) {
  if (b >= e) return;
  int64_t start = 0;
  for (size_t d = L.row_shape.size(); d-- > 0;) {
    start += (r % L.row_shape[d]) * L.row_strides[d];
    r /= L.row_shape[d];
  }
  const T* row = base + start;
  for (int64_t s = b / L.seg_len; s * L.seg_len < e; ++s) {
    const int64_t lo = std::max(b, s * L.seg_len), hi = std::min(e, (s + 1) * L.seg_len);
    f(row + L.seg_offset[s] + (lo - s * L.seg_len), lo, hi - lo);
  }
}

template <class T, class O>
void sum_rows(const T* x, const RowLayout& L, double scale, O* out) {
  using Acc = acc_t<T>;
  reduce_rows<Acc>(
      L,
      [&](int64_t r, int64_t b, int64_t e) {
        Acc acc = 0;
        for_each_piece(x, L, r, b, e, [&](const T* p, int64_t, int64_t n) { acc += sum_span<Acc>(p, n); });
        return acc;
      },
      [](Acc a, Acc b) { return a + b; },
      [&](int64_t r, Acc sum) {
        out[r] = scale == 1.0 ? static_cast<O>(signed_value(sum))
                              : static_cast<O>(static_cast<double>(signed_value(sum)) * scale);
      });
}

// out[a, b] = scale * sum_r x[a, r, b]: whole blocks of output columns
// accumulate down r (each column in one thread, so deterministic), eight rows
// of x per pass over the block, summed pairwise (an eighth of the accumulator
// loads and stores; the block fits L1 and covers a 28x28 plane).
template <class T, class O>
void sum_columns(const T* x, int64_t A, int64_t R, int64_t B, double scale, O* out) {
  using Acc = acc_t<T>;
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (B + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (A * R * B >= kParallelNumel)
  for (int64_t t = 0; t < A * blocks; ++t) {
    const int64_t a = t / blocks, b0 = (t % blocks) * kBlock, n = std::min(kBlock, B - b0);
    Acc acc[kBlock] = {};
    const T* base = x + a * R * B + b0;
    int64_t r = 0;
    for (; r + 8 <= R; r += 8) {
      const T* x0 = base + r * B;
      for (int64_t j = 0; j < n; ++j) {
        Acc s[8];
        for (int q = 0; q < 8; ++q) s[q] = static_cast<Acc>(x0[q * B + j]);
        acc[j] += ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
      }
    }
    for (; r < R; ++r)
      for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<Acc>(base[r * B + j]);
    O* o = out + a * B + b0;
    for (int64_t j = 0; j < n; ++j)
      o[j] = scale == 1.0 ? static_cast<O>(signed_value(acc[j]))
                          : static_cast<O>(static_cast<double>(signed_value(acc[j])) * scale);
  }
}

// {sum (x - m)^2, sum (x - m)} over p[0, n), with 8 accumulators of each.
template <class T>
std::pair<double, double> deviation_span(const T* p, int64_t n, double m) {
  double sq[8] = {}, lin[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const double d = static_cast<double>(p[i + k]) - m;
      sq[k] += d * d;
      lin[k] += d;
    }
  }
  for (; i < n; ++i) {
    const double d = static_cast<double>(p[i]) - m;
    sq[0] += d * d;
    lin[0] += d;
  }
  double s = 0.0, l = 0.0;
  for (int k = 0; k < 8; ++k) s += sq[k], l += lin[k];
  return {s, l};
}

// Two-pass variance: mean, then sum (x-m)^2 corrected by (sum (x-m))^2 / n.
template <class T>
void var_rows(const T* x, const RowLayout& L, int64_t correction, T* var, T* mean) {
  const auto n = static_cast<double>(L.len);
  std::vector<double> m(static_cast<size_t>(L.rows));
  reduce_rows<double>(
      L,
      [&](int64_t r, int64_t b, int64_t e) {
        double acc = 0;
        for_each_piece(x, L, r, b, e, [&](const T* p, int64_t, int64_t k) { acc += sum_span<double>(p, k); });
        return acc;
      },
      [](double a, double b) { return a + b; }, [&](int64_t r, double sum) { m[r] = sum / n; });
  using P = std::pair<double, double>;  // sum of squared deviations, sum of deviations
  const double denom = static_cast<double>(std::max<int64_t>(0, L.len - correction));
  reduce_rows<P>(
      L,
      [&](int64_t r, int64_t b, int64_t e) {
        P acc{0.0, 0.0};
        for_each_piece(x, L, r, b, e, [&](const T* p, int64_t, int64_t k) {
          const P piece = deviation_span(p, k, m[r]);
          acc.first += piece.first;
          acc.second += piece.second;
        });
        return acc;
      },
      [](P a, P b) { return P{a.first + b.first, a.second + b.second}; },
      [&](int64_t r, P dev) {
        const double ss = dev.first - dev.second * dev.second / n;
        var[r] = static_cast<T>((ss < 0.0 ? 0.0 : ss) / denom);  // keeps NaN
        if (mean) mean[r] = static_cast<T>(m[r]);
      });
}

// Does `v` beat `best`? NaN beats everything (PyTorch propagates NaN); ties keep the first.
template <bool kIsMax, class T>
bool beats(T v, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return !std::isnan(best);
  }
  return kIsMax ? v > best : v < best;
}

// Does v replace m as the running extreme? NaN always does, and then sticks
// (nothing beats a NaN m): the vector-friendly form of beats().
template <bool kIsMax, class T>
inline bool takes(T v, T m) {
  return (kIsMax ? v > m : v < m) | (v != v);
}

// The extreme of p[0, n) (n > 0), NaN if any: 256 bytes of independent lanes
// (compare + blend vectorize; one running extreme, or Eigen's maxCoeff, was
// latency-bound: 2.6x slower than PyTorch on 4096-element rows).
template <bool kIsMax, class T>
T extremum_value(const T* p, int64_t n) {
  constexpr int kLanes = sizeof(T) >= 4 ? 256 / sizeof(T) : 64;
  T lane[kLanes];
  for (int k = 0; k < kLanes; ++k) lane[k] = p[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] = takes<kIsMax>(p[i + k], lane[k]) ? p[i + k] : lane[k];
  for (int k = 0; i < n; ++i, ++k) lane[k] = takes<kIsMax>(p[i], lane[k]) ? p[i] : lane[k];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) lane[k] = takes<kIsMax>(lane[k + w], lane[k]) ? lane[k + w] : lane[k];
  return lane[0];
}

// extremum_value for float and double: a plain max (min) per lane, one
// vmaxps, plus a running sum per lane that only serves to notice a NaN (NaN
// reaches the sum; so can +inf + -inf or an overflow of both signs, which
// only costs a rescan): 2 vector operations per vector instead of the
// NaN-aware select's 4 (0.80x of PyTorch on 4096x4096 rows), with software
// prefetch (ops/cpu/sum_float.h). Any NaN: the
// exact scan above decides. Ties are equal values, so the lane order does not
// matter (+0 vs -0 aside, as in PyTorch).
template <bool kIsMax, class T>
T floating_extremum(const T* p, int64_t n) {
  // 128 bytes of lanes and as many of sums: 8 AVX2 registers of 16 (256 bytes
  // spilled one with AVX2, and measured slower with AVX-512 too).
  constexpr int kLanes = 128 / sizeof(T);
  T lane[kLanes], nan_check[kLanes] = {};
  for (int k = 0; k < kLanes; ++k) lane[k] = p[0];
  auto step = [](T v, T m) { return (kIsMax ? v > m : v < m) ? v : m; };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    cpu::prefetch_ahead(p + i, kLanes * sizeof(T));
    for (int k = 0; k < kLanes; ++k) {
      lane[k] = step(p[i + k], lane[k]);
      nan_check[k] += p[i + k];
    }
  }
  for (int k = 0; i < n; ++i, ++k) {
    lane[k] = step(p[i], lane[k]);
    nan_check[k] += p[i];
  }
  T check = 0;
  for (int k = 0; k < kLanes; ++k) check += nan_check[k];
  if (std::isnan(check)) return extremum_value<kIsMax>(p, n);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) lane[k] = step(lane[k + w], lane[k]);
  return lane[0];
}

// The extreme of p[0, n) (n > 0) and, when asked, its first index (the first
// NaN if there is one; else 0): the value first, then a search for where it is.
template <bool kIsMax, class T>
std::pair<T, int64_t> extremum_span(const T* p, int64_t n, bool want_index) {
  T m;
  if constexpr (std::is_floating_point_v<T>)
    m = floating_extremum<kIsMax>(p, n);
  else
    m = extremum_value<kIsMax>(p, n);
  if (!want_index) return {m, 0};
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(m)) {
      for (int64_t j = 0; j < n; ++j)
        if (std::isnan(p[j])) return {p[j], j};
    }
  }
  for (int64_t j = 0; j < n; ++j)
    if (p[j] == m) return {m, j};
  return {m, 0};  // unreachable: m is one of the values
}

template <bool kIsMax, class T>
void extremum_rows(const T* x, const RowLayout& L, T* values, int64_t* indices) {
  using P = std::pair<T, int64_t>;  // value, index along the row (-1: none yet)
  reduce_rows<P>(
      L,
      [&](int64_t r, int64_t b, int64_t e) {
        P best{T(), -1};
        for_each_piece(x, L, r, b, e, [&](const T* p, int64_t first, int64_t n) {
          const P piece = extremum_span<kIsMax>(p, n, indices != nullptr);
          if (best.second < 0 || beats<kIsMax>(piece.first, best.first)) best = {piece.first, first + piece.second};
        });
        return best;
      },
      [](P a, P b) { return b.second >= 0 && (a.second < 0 || beats<kIsMax>(b.first, a.first)) ? b : a; },
      [&](int64_t r, P best) {
        if (values) values[r] = best.first;
        if (indices) indices[r] = best.second;
      });
}

// ---- CPU kernels on tensors (what the stubs hold) ---------------------------------

void sum_rows_cpu(const Tensor& base, const RowLayout& rows, const Tensor& out, double scale) {
  MINIDL_DISPATCH_ALL(base.dtype(), "sum", [&] {
    using O = std::conditional_t<std::is_floating_point_v<scalar_t>, scalar_t, int64_t>;
    sum_rows(static_cast<const scalar_t*>(base.raw_data()), rows, scale, out.data_ptr<O>());
  });
}

void sum_columns_cpu(const Tensor& x, const Tensor& out, double scale) {
  MINIDL_DISPATCH_ALL(x.dtype(), "sum", [&] {
    using O = std::conditional_t<std::is_floating_point_v<scalar_t>, scalar_t, int64_t>;
    sum_columns(static_cast<const scalar_t*>(x.raw_data()), x.shape()[0], x.shape()[1], x.shape()[2], scale,
                out.data_ptr<O>());
  });
}

void var_rows_cpu(const Tensor& base, const RowLayout& rows, const Tensor& var, const Tensor& mean,
                  int64_t correction) {
  MINIDL_DISPATCH_FLOATING(base.dtype(), "var", [&] {
    var_rows(static_cast<const scalar_t*>(base.raw_data()), rows, correction, var.data_ptr<scalar_t>(),
             mean.defined() ? mean.data_ptr<scalar_t>() : nullptr);
  });
}

void extremum_rows_cpu(const Tensor& base, const RowLayout& rows, const Tensor& values, const Tensor& indices,
                       bool is_max) {
  MINIDL_DISPATCH_ALL(base.dtype(), is_max ? "max" : "min", [&] {
    const auto* x = static_cast<const scalar_t*>(base.raw_data());
    scalar_t* v = values.defined() ? values.data_ptr<scalar_t>() : nullptr;
    int64_t* i = indices.defined() ? indices.data_ptr<int64_t>() : nullptr;
    if (is_max)
      extremum_rows<true>(x, rows, v, i);
    else
      extremum_rows<false>(x, rows, v, i);
  });
}

void expand_backward_cpu(const Tensor& g, const Tensor& dx, double scale) {
  MINIDL_DISPATCH_FLOATING(dx.dtype(), "sum_backward", [&] {
    scalar_t* out = dx.data_ptr<scalar_t>();
    const scalar_t* in = g.data_ptr<scalar_t>();
    const auto s = static_cast<scalar_t>(scale);
    for_each_row<2>(dx.shape(), {dx.strides(), g.strides()},
                    [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& step) {
                      for (int64_t k = 0; k < n; ++k) out[off[0] + k * step[0]] = s * in[off[1] + k * step[1]];
                    });
  });
}

void var_backward_cpu(const Tensor& g, const Tensor& x, const Tensor& m, const Tensor& dx, double scale) {
  MINIDL_DISPATCH_FLOATING(dx.dtype(), "var_backward", [&] {
    scalar_t* out = dx.data_ptr<scalar_t>();
    const scalar_t* gp = g.data_ptr<scalar_t>();
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* mp = m.data_ptr<scalar_t>();
    const auto s = static_cast<scalar_t>(scale);
    for_each_row<4>(dx.shape(), {dx.strides(), g.strides(), x.strides(), m.strides()},
                    [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& st) {
                      for (int64_t k = 0; k < n; ++k)
                        out[off[0] + k * st[0]] =
                            s * gp[off[1] + k * st[1]] * (xp[off[2] + k * st[2]] - mp[off[3] + k * st[3]]);
                    });
  });
}

// A scatter that moves values without arithmetic, so it runs on the 16-bit
// types as they are. Not through Float32Compute: dx is a view of the kept
// shape whose writes land up to idx * dim_stride past the span it reaches, and
// a float32 copy of that span is all the wrapper would give it (the 16-bit
// max(dim) backward wrote past its buffer; found by the H100 run's
// test_cuda_ops_half, whose CPU reference this is).
void index_backward_cpu(const Tensor& g, const Tensor& idx, const Tensor& dx, int64_t dim) {
  MINIDL_DISPATCH_ALL_AND_HALF(dx.dtype(), "max_backward", [&] {
    scalar_t* out = dx.data_ptr<scalar_t>();
    const scalar_t* gp = g.data_ptr<scalar_t>();
    const int64_t* ip = idx.data_ptr<int64_t>();
    const int64_t dim_stride = dx.dim() == 0 ? 0 : dx.strides()[dim];
    for_each_row<3>(g.shape(), {dx.strides(), g.strides(), idx.strides()},
                    [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
                      for (int64_t k = 0; k < n; ++k)
                        out[off[0] + k * st[0] + ip[off[2] + k * st[2]] * dim_stride] = gp[off[1] + k * st[1]];
                    });
  });
}

void even_backward_cpu(const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& dx) {
  MINIDL_DISPATCH_FLOATING(dx.dtype(), "max_backward", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();  // contiguous
    const scalar_t target = *y.data_ptr<scalar_t>();
    const int64_t n = x.numel();
    auto hit = [&](scalar_t v) { return v == target || (std::isnan(v) && std::isnan(target)); };
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) count += hit(xp[i]) ? 1 : 0;
    const scalar_t share = *g.data_ptr<scalar_t>() / static_cast<scalar_t>(count);
    scalar_t* out = dx.data_ptr<scalar_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = hit(xp[i]) ? share : scalar_t(0);
  });
}

}  // namespace

void register_reduce_cpu_kernels() {
  sum_rows_stub.set(DeviceType::CPU, cpu::Float32Compute<sum_rows_cpu, 2>::run);
  sum_columns_stub.set(DeviceType::CPU, cpu::Float32Compute<sum_columns_cpu, 1>::run);
  var_rows_stub.set(DeviceType::CPU, cpu::Float32Compute<var_rows_cpu, 2, 3>::run);
  extremum_rows_stub.set(DeviceType::CPU, cpu::Float32Compute<extremum_rows_cpu, 2>::run);
  expand_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<expand_backward_cpu, 1>::run);
  var_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<var_backward_cpu, 3>::run);
  index_backward_stub.set(DeviceType::CPU, index_backward_cpu);
  even_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<even_backward_cpu, 3>::run);
}

}  // namespace minidl
