// Reductions over a set of dims R (n = number of elements reduced into each
// output; an empty dims list means all dims):
//   sum:   y = sum_R x                        backward: dx = dy (broadcast back over R)
//   mean:  y = sum_R x / n                    backward: dx = dy / n
//   var:   y = sum_R (x - m)^2 / max(0, n-c)  backward: dx = dy * 2 (x - m) / (n - c)
//          with m = mean_R x and c = 1 if unbiased else 0; saves x and m (keepdim-shaped).
//   max/min (whole tensor): backward spreads dy evenly over the elements equal to
//          the result, as PyTorch does; saves x and y.
//   max/min (along dim): backward puts dy at the returned index; saves the indices.
//   argmax: int64, not differentiable.
// Saved non-tensor state: the input shape, the wrapped reduced dims, keepdim.
// Backward returns fresh gradients (the engine accumulates them into .grad).
//
// Kernel layout: each output reduces one "row" of n input elements (kept dims
// pick the row, reduced dims run along it in row-major order). Rows are read
// in place as contiguous segments when the innermost reduced dim has stride 1
// and some length (NCHW over {0, 2, 3}: segments of H*W); otherwise the input
// is first copied with the reduced dims last. Rows are cut into fixed-size
// chunks reduced in parallel and combined in order, so results do not depend
// on the thread count. Sums whose reduced dims form one block followed by kept
// dims ([A, R, B] with B > 1, e.g. a bias gradient over the batch) accumulate
// whole output rows instead. float32 accumulates in double; var is two-pass
// with a compensation term.
#include "ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "core/autograd/function.h"
#include "core/dispatch.h"
#include "ops/strided_loop.h"

namespace minidl {

namespace {

constexpr int64_t kChunk = 16384;  // elements per partial result
constexpr int64_t kParallelNumel = 32768;

// ---- layout -------------------------------------------------------------------

struct ReducePlan {
  Shape in_shape;
  std::vector<bool> reduced;  // per input dim
  Shape reduced_dims;         // wrapped, ascending
  Shape kept_shape;           // output shape with keepdim (reduced dims are 1)
  Shape out_shape;            // the output's shape
  int64_t rows = 1;           // output elements
  int64_t row_len = 1;        // elements reduced into each output (n)
};

ReducePlan make_plan(const Shape& shape, const Shape& dims, bool keepdim, const char* op) {
  const auto ndim = static_cast<int64_t>(shape.size());
  ReducePlan p;
  p.in_shape = shape;
  p.reduced.assign(shape.size(), dims.empty());
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(ndim, 1)), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, ndim, op);
    MINIDL_CHECK(!seen[w], op, ": dim ", w, " appears multiple times in the list of dims");
    seen[w] = true;
    if (ndim > 0) p.reduced[w] = true;
  }
  for (int64_t d = 0; d < ndim; ++d) {
    if (p.reduced[d]) {
      p.reduced_dims.push_back(d);
      p.kept_shape.push_back(1);
      if (keepdim) p.out_shape.push_back(1);
      p.row_len *= shape[d];
    } else {
      p.kept_shape.push_back(shape[d]);
      p.out_shape.push_back(shape[d]);
      p.rows *= shape[d];
    }
  }
  return p;
}

// A view of x's storage with the given shape and strides, without history.
Tensor strided_view(const Tensor& x, Shape shape, Shape strides) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.impl()->storage;
  impl->offset = x.storage_offset();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = x.dtype();
  return Tensor(std::move(impl));
}

// Where each row's elements live, relative to a base pointer: element j of
// row r is at row_start(r) + seg_offset[j / seg_len] + j % seg_len, where
// row_start walks the kept dims (row_shape, row_strides) row-major.
struct RowLayout {
  Shape row_shape;
  Shape row_strides;
  int64_t rows = 1;
  std::vector<int64_t> seg_offset;
  int64_t seg_len = 1;
  int64_t len = 1;  // n
  int64_t chunk_len = kChunk;  // elements per partial result
  bool chunk_major = false;    // reduce chunk c of every row before chunk c + 1
};

struct Rows {
  Tensor base;  // the data the offsets point into
  RowLayout layout;
};

constexpr int64_t kMinSegment = 16;  // rows made of shorter runs are copied first

// Offsets of every index of (shape, strides), row-major.
std::vector<int64_t> all_offsets(const Shape& shape, const Shape& strides) {
  std::vector<int64_t> out{0};
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<int64_t> next;
    next.reserve(out.size() * static_cast<size_t>(shape[d]));
    for (int64_t o : out)
      for (int64_t i = 0; i < shape[d]; ++i) next.push_back(o + i * strides[d]);
    out = std::move(next);
  }
  return out;
}

// The kept (reduced = false) or reduced dims of x in order, size-1 dims
// dropped, neighbours merged where one steps exactly over the other.
std::pair<Shape, Shape> dim_group(const Tensor& x, const ReducePlan& p, bool reduced) {
  Shape shape, strides;
  for (size_t d = 0; d < p.reduced.size(); ++d) {
    const int64_t size = x.shape()[d], stride = x.strides()[d];
    if (p.reduced[d] != reduced || size == 1) continue;
    if (!shape.empty() && strides.back() == stride * size) {
      shape.back() *= size;
      strides.back() = stride;
    } else {
      shape.push_back(size);
      strides.push_back(stride);
    }
  }
  return {shape, strides};
}

Rows as_rows(const Tensor& x, const ReducePlan& p) {
  auto [kept, kept_strides] = dim_group(x, p, false);
  auto [red, red_strides] = dim_group(x, p, true);
  Rows r;
  r.layout.len = p.row_len;
  const bool in_place =
      red.empty() || (red_strides.back() == 1 && (red.size() == 1 || red.back() >= kMinSegment));
  if (in_place) {
    r.base = x;
    r.layout.seg_len = red.empty() ? 1 : red.back();
    if (!red.empty()) red.pop_back(), red_strides.pop_back();
    r.layout.seg_offset = all_offsets(red, red_strides);
    r.layout.row_shape = kept;
    r.layout.row_strides = kept_strides;
    r.layout.rows = p.rows;
    // Long segments further apart than rows (NCHW over {0, 2, 3}): read one
    // segment of every row in turn, which walks memory in order. (Short ones
    // would make too many partial results.)
    const int64_t seg_step = red.empty() ? 0 : red_strides.back();
    const int64_t row_step = kept.empty() ? 0 : kept_strides.back();
    if (seg_step > row_step && r.layout.seg_len >= 256 && r.layout.seg_len <= kChunk) {
      r.layout.chunk_len = r.layout.seg_len;
      r.layout.chunk_major = true;
    }
    return r;
  }
  // Copy with the kept dims first and the reduced dims last: rows are contiguous.
  Shape shape, strides;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t d = 0; d < p.reduced.size(); ++d) {
      if (p.reduced[d] != (pass == 1)) continue;
      shape.push_back(x.shape()[d]);
      strides.push_back(x.strides()[d]);
    }
  }
  r.base = strided_view(x, shape, strides).contiguous();
  r.layout.seg_len = p.row_len;
  r.layout.seg_offset = {0};
  r.layout.row_shape = {p.rows};
  r.layout.row_strides = {p.row_len};
  r.layout.rows = p.rows;
  return r;
}

// {A, R, B} when x is contiguous and its reduced dims form one block R
// between kept dims A and B with B > 1: a sum then accumulates whole rows of B.
std::optional<Shape> column_block(const Tensor& x, const ReducePlan& p) {
  if (!x.is_contiguous()) return std::nullopt;
  int stage = 0;  // 0: leading kept dims, 1: reduced block, 2: trailing kept dims
  int64_t a = 1, r = 1, b = 1;
  for (size_t d = 0; d < p.in_shape.size(); ++d) {
    const int64_t s = p.in_shape[d];
    if (s == 1) continue;  // a size-1 dim can sit in any group
    if (p.reduced[d]) {
      if (stage == 2) return std::nullopt;
      stage = 1;
      r *= s;
    } else if (stage == 0) {
      a *= s;
    } else {
      stage = 2;
      b *= s;
    }
  }
  if (b <= 1) return std::nullopt;
  return Shape{a, r, b};
}

// A tensor of the output's shape (`y`, keepdim or not) seen with x's shape:
// stride 0 along the reduced dims, so kernels can walk it beside x.
Tensor broadcast_back(const Tensor& y, const ReducePlan& p) {
  const bool keepdim = y.dim() == static_cast<int64_t>(p.in_shape.size());
  Shape strides;
  size_t k = 0;
  for (size_t d = 0; d < p.in_shape.size(); ++d) {
    if (p.reduced[d]) {
      strides.push_back(0);
      if (keepdim) ++k;
    } else {
      strides.push_back(y.strides()[k++]);
    }
  }
  return strided_view(y, p.in_shape, strides);
}

// ---- CPU kernels on raw pointers ------------------------------------------------

template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

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

// Sum with 8 independent accumulators (vectorizes; a little more accurate too).
template <class Acc, class T>
Acc sum_span(const T* x, int64_t n) {
  Acc lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += static_cast<Acc>(x[i + k]);
  for (; i < n; ++i) lane[0] += static_cast<Acc>(x[i]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

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
        out[r] = scale == 1.0 ? static_cast<O>(sum) : static_cast<O>(static_cast<double>(sum) * scale);
      });
}

// out[a, b] = scale * sum_r x[a, r, b]: whole blocks of output columns
// accumulate down r (each column in one thread, so deterministic).
template <class T, class O>
void sum_columns(const T* x, int64_t A, int64_t R, int64_t B, double scale, O* out) {
  using Acc = acc_t<T>;
  constexpr int64_t kBlock = 512;
  const int64_t blocks = (B + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (A * R * B >= kParallelNumel)
  for (int64_t t = 0; t < A * blocks; ++t) {
    const int64_t a = t / blocks, b0 = (t % blocks) * kBlock, n = std::min(kBlock, B - b0);
    Acc acc[kBlock] = {};
    const T* base = x + a * R * B + b0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<Acc>(base[r * B + j]);
    O* o = out + a * B + b0;
    for (int64_t j = 0; j < n; ++j)
      o[j] = scale == 1.0 ? static_cast<O>(acc[j]) : static_cast<O>(static_cast<double>(acc[j]) * scale);
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

// The extreme of p[0, n) (n > 0) and its first index: Eigen's vectorized
// max/min (NaN-propagating) for the value, then a search for where it is.
template <bool kIsMax, class T>
std::pair<T, int64_t> extremum_span(const T* p, int64_t n) {
  const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> v(p, n);
  const T m = kIsMax ? v.template maxCoeff<Eigen::PropagateNaN>() : v.template minCoeff<Eigen::PropagateNaN>();
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
          const P piece = extremum_span<kIsMax>(p, n);
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

// Row kernels read base's data through a RowLayout; out, var, mean, values and
// indices are contiguous with one element per row (values or indices may be undefined).
using SumRowsFn = void(const Tensor& base, const RowLayout& rows, const Tensor& out, double scale);
// x: contiguous [A, R, B]; out[a, b] = scale * sum_r x[a, r, b].
using SumColumnsFn = void(const Tensor& x, const Tensor& out, double scale);
using VarRowsFn = void(const Tensor& base, const RowLayout& rows, const Tensor& var, const Tensor& mean,
                       int64_t correction);
using ExtremumRowsFn = void(const Tensor& base, const RowLayout& rows, const Tensor& values,
                            const Tensor& indices, bool is_max);
// dx (contiguous, x's shape) = scale * g, g broadcast to x's shape.
using ExpandBackwardFn = void(const Tensor& g, const Tensor& dx, double scale);
// dx = scale * g * (x - m), g and m broadcast to x's shape.
using VarBackwardFn = void(const Tensor& g, const Tensor& x, const Tensor& m, const Tensor& dx, double scale);
// dx[..., idx, ...] = g along `dim` (dx comes zeroed); dx, g, idx have the keepdim shape.
using IndexBackwardFn = void(const Tensor& g, const Tensor& idx, const Tensor& dx, int64_t dim);
// dx = g / count where x == y (or both NaN), 0 elsewhere; g, y 0-d.
using EvenBackwardFn = void(const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& dx);

DispatchStub<SumRowsFn> sum_rows_stub("sum");
DispatchStub<SumColumnsFn> sum_columns_stub("sum");
DispatchStub<VarRowsFn> var_rows_stub("var");
DispatchStub<ExtremumRowsFn> extremum_rows_stub("max/min");
DispatchStub<ExpandBackwardFn> expand_backward_stub("sum_backward");
DispatchStub<VarBackwardFn> var_backward_stub("var_backward");
DispatchStub<IndexBackwardFn> index_backward_stub("max_backward");
DispatchStub<EvenBackwardFn> even_backward_stub("max_backward");

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

void index_backward_cpu(const Tensor& g, const Tensor& idx, const Tensor& dx, int64_t dim) {
  MINIDL_DISPATCH_FLOATING(dx.dtype(), "max_backward", [&] {
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

// ---- op helpers ---------------------------------------------------------------------

void check_input(const Tensor& x, const char* op) {
  MINIDL_CHECK(x.defined(), op, ": expected a defined tensor, got an undefined one");
}

TensorOptions like(const Tensor& x, DType dtype) { return TensorOptions(dtype).device(x.device()); }

// scale * sum over the plan's dims.
Tensor sum_forward(const Tensor& x, const ReducePlan& p, double scale) {
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : kInt64;
  Tensor out = empty(p.out_shape, like(x, out_dtype));
  if (auto arb = column_block(x, p)) {
    sum_columns_stub(x.device())(strided_view(x, *arb, contiguous_strides(*arb)), out, scale);
  } else {
    const Rows rows = as_rows(x, p);
    sum_rows_stub(x.device())(rows.base, rows.layout, out, scale);
  }
  return out;
}

ReducePlan plan_from_saved(AutogradContext* ctx, bool keepdim) {
  return make_plan(ctx->saved_data["shape"].to_int_list(), ctx->saved_data["dims"].to_int_list(),
                   keepdim, "backward");
}

void save_plan(AutogradContext* ctx, const ReducePlan& p, bool keepdim) {
  ctx->saved_data["shape"] = p.in_shape;
  ctx->saved_data["dims"] = p.reduced_dims;  // empty only for a 0-d input: all dims again
  ctx->saved_data["keepdim"] = keepdim;
}

// dx = scale * dy broadcast back to x's shape.
Tensor expand_backward(const Tensor& g, const ReducePlan& p, double scale) {
  Tensor dx = empty(p.in_shape, like(g, g.dtype()));
  expand_backward_stub(g.device())(broadcast_back(g, p), dx, scale);
  return dx;
}

// ---- autograd functions --------------------------------------------------------------

struct Sum : autograd::Function<Sum> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Shape& dims, bool keepdim) {
    const ReducePlan p = make_plan(x.shape(), dims, keepdim, "sum");
    save_plan(ctx, p, keepdim);
    return sum_forward(x, p, 1.0);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const ReducePlan p = plan_from_saved(ctx, ctx->saved_data["keepdim"].to_bool());
    return {expand_backward(grads[0], p, 1.0), Tensor(), Tensor()};
  }
};

struct Mean : autograd::Function<Mean> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Shape& dims, bool keepdim) {
    const ReducePlan p = make_plan(x.shape(), dims, keepdim, "mean");
    save_plan(ctx, p, keepdim);
    return sum_forward(x, p, 1.0 / static_cast<double>(p.row_len));  // 0/0 = nan when empty
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const ReducePlan p = plan_from_saved(ctx, ctx->saved_data["keepdim"].to_bool());
    return {expand_backward(grads[0], p, 1.0 / static_cast<double>(p.row_len)), Tensor(), Tensor()};
  }
};

struct Var : autograd::Function<Var> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Shape& dims, bool unbiased,
                        bool keepdim) {
    const ReducePlan p = make_plan(x.shape(), dims, keepdim, "var");
    save_plan(ctx, p, keepdim);
    const int64_t correction = unbiased ? 1 : 0;
    ctx->saved_data["correction"] = correction;
    Tensor out = empty(p.out_shape, like(x, x.dtype()));
    Tensor m = empty(p.kept_shape, like(x, x.dtype()));
    const Rows rows = as_rows(x, p);
    var_rows_stub(x.device())(rows.base, rows.layout, out, m, correction);
    ctx->save_for_backward({x, m});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const ReducePlan p = plan_from_saved(ctx, ctx->saved_data["keepdim"].to_bool());
    const auto saved = ctx->get_saved_variables();
    const Tensor& x = saved[0];
    const double denom = static_cast<double>(p.row_len - ctx->saved_data["correction"].to_int());
    Tensor dx = empty(p.in_shape, like(x, x.dtype()));
    var_backward_stub(x.device())(broadcast_back(grads[0], p), x, broadcast_back(saved[1], p), dx,
                                  2.0 / denom);
    return {dx, Tensor(), Tensor(), Tensor()};
  }
};

template <bool kIsMax>
struct ExtremumAll {
  static constexpr const char* kOp = kIsMax ? "max()" : "min()";
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    MINIDL_CHECK(x.numel() > 0, kOp, ": Expected reduction dim to be specified for input.numel() == 0. "
                 "Specify the reduction dim with the 'dim' argument.");
    const ReducePlan p = make_plan(x.shape(), {}, false, kOp);
    Tensor out = empty({}, like(x, x.dtype()));
    const Rows rows = as_rows(x, p);
    extremum_rows_stub(x.device())(rows.base, rows.layout, out, Tensor(), kIsMax);
    ctx->save_for_backward({x, out});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor x = saved[0].contiguous();
    Tensor dx = empty(x.shape(), like(x, x.dtype()));
    even_backward_stub(x.device())(grads[0].contiguous(), x, saved[1], dx);
    return {dx};
  }
};

template <bool kIsMax>
struct ExtremumDim {
  static constexpr const char* kOp = kIsMax ? "max()" : "min()";
  static variable_list forward(AutogradContext* ctx, const Tensor& x, int64_t dim, bool keepdim) {
    const ReducePlan p = make_plan(x.shape(), {dim}, keepdim, kOp);
    MINIDL_CHECK(x.dim() == 0 || p.row_len > 0, kOp, ": Expected reduction dim ", p.reduced_dims[0],
                 " to have non-zero size.");
    save_plan(ctx, p, keepdim);
    Tensor values = empty(p.out_shape, like(x, x.dtype()));
    Tensor indices = empty(p.out_shape, like(x, kInt64));
    const Rows rows = as_rows(x, p);
    extremum_rows_stub(x.device())(rows.base, rows.layout, values, indices, kIsMax);
    ctx->save_for_backward({indices});
    ctx->mark_non_differentiable({indices});
    return {values, indices};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const ReducePlan p = plan_from_saved(ctx, ctx->saved_data["keepdim"].to_bool());
    const Tensor idx = ctx->get_saved_variables()[0];
    const Tensor& g = grads[0];
    Tensor dx = zeros(p.in_shape, like(g, g.dtype()));
    // View g and idx with the keepdim shape (a no-op when keepdim was set).
    auto kept = [&](const Tensor& t) {
      Tensor b = broadcast_back(t, p);
      return strided_view(b, p.kept_shape, b.strides());
    };
    Tensor dx_kept = strided_view(dx, p.kept_shape, dx.strides());
    const int64_t dim = p.reduced_dims.empty() ? 0 : p.reduced_dims[0];
    index_backward_stub(g.device())(kept(g), kept(idx), dx_kept, dim);
    return {dx, Tensor(), Tensor()};
  }
};

}  // namespace

// Node names follow PyTorch's (MaxBackward, ...) for both forms.
namespace reduce_whole {
struct Max : autograd::Function<Max>, ExtremumAll<true> {};
struct Min : autograd::Function<Min>, ExtremumAll<false> {};
}  // namespace reduce_whole
namespace reduce_dim {
struct Max : autograd::Function<Max>, ExtremumDim<true> {};
struct Min : autograd::Function<Min>, ExtremumDim<false> {};
}  // namespace reduce_dim

void register_reduce_cpu_kernels() {
  sum_rows_stub.set(DeviceType::CPU, sum_rows_cpu);
  sum_columns_stub.set(DeviceType::CPU, sum_columns_cpu);
  var_rows_stub.set(DeviceType::CPU, var_rows_cpu);
  extremum_rows_stub.set(DeviceType::CPU, extremum_rows_cpu);
  expand_backward_stub.set(DeviceType::CPU, expand_backward_cpu);
  var_backward_stub.set(DeviceType::CPU, var_backward_cpu);
  index_backward_stub.set(DeviceType::CPU, index_backward_cpu);
  even_backward_stub.set(DeviceType::CPU, even_backward_cpu);
}

// ---- public API ------------------------------------------------------------------------

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  check_input(x, "sum");
  return Sum::apply(x, dims, keepdim);
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  check_input(x, "mean");
  MINIDL_CHECK(is_floating(x.dtype()),
               "mean(): could not infer output dtype. Input dtype must be either a floating point "
               "or complex dtype. Got: ", dtype_name(x.dtype()));
  return Mean::apply(x, dims, keepdim);
}

Tensor var(const Tensor& x, bool unbiased) { return var(x, {}, unbiased, false); }

Tensor var(const Tensor& x, const Shape& dims, bool unbiased, bool keepdim) {
  check_input(x, "var");
  MINIDL_CHECK(is_floating(x.dtype()), "var: std and var only support floating point and complex dtypes, got ",
               dtype_name(x.dtype()));
  return Var::apply(x, dims, unbiased, keepdim);
}

Tensor var(const Tensor& x, std::initializer_list<int64_t> dims, bool unbiased, bool keepdim) {
  return var(x, Shape(dims), unbiased, keepdim);
}

Tensor max(const Tensor& x) {
  check_input(x, "max");
  return reduce_whole::Max::apply(x);
}

Tensor min(const Tensor& x) {
  check_input(x, "min");
  return reduce_whole::Min::apply(x);
}

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  check_input(x, "max");
  auto out = reduce_dim::Max::apply(x, dim, keepdim);
  return {out[0], out[1]};
}

ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  check_input(x, "min");
  auto out = reduce_dim::Min::apply(x, dim, keepdim);
  return {out[0], out[1]};
}

Tensor argmax(const Tensor& x) {
  check_input(x, "argmax");
  MINIDL_CHECK(x.numel() > 0, "argmax(): Expected reduction dim to be specified for input.numel() == 0.");
  const ReducePlan p = make_plan(x.shape(), {}, false, "argmax()");
  Tensor out = empty({}, like(x, kInt64));
  const Rows rows = as_rows(x, p);
  extremum_rows_stub(x.device())(rows.base, rows.layout, Tensor(), out, true);
  return out;
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  check_input(x, "argmax");
  const ReducePlan p = make_plan(x.shape(), {dim}, keepdim, "argmax()");
  MINIDL_CHECK(x.dim() == 0 || p.row_len > 0, "argmax(): Expected reduction dim ", p.reduced_dims[0],
               " to have non-zero size.");
  Tensor out = empty(p.out_shape, like(x, kInt64));
  const Rows rows = as_rows(x, p);
  extremum_rows_stub(x.device())(rows.base, rows.layout, Tensor(), out, true);
  return out;
}

// ---- Tensor methods -----------------------------------------------------------------------

Tensor Tensor::sum() const { return minidl::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return minidl::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return minidl::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return minidl::mean(*this, dims, keepdim); }
Tensor Tensor::var(bool unbiased) const { return minidl::var(*this, unbiased); }
Tensor Tensor::var(const Shape& dims, bool unbiased, bool keepdim) const {
  return minidl::var(*this, dims, unbiased, keepdim);
}
Tensor Tensor::var(std::initializer_list<int64_t> dims, bool unbiased, bool keepdim) const {
  return minidl::var(*this, Shape(dims), unbiased, keepdim);
}
Tensor Tensor::max() const { return minidl::max(*this); }
Tensor Tensor::min() const { return minidl::min(*this); }
Tensor Tensor::argmax() const { return minidl::argmax(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return minidl::argmax(*this, dim, keepdim); }

}  // namespace minidl
