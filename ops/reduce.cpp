// Reductions over a set of dims R (n = number of elements reduced into each
// output; an empty dims list means all dims):
//   sum:   y = sum_R x                        backward: dx = dy (broadcast back over R)
//   mean:  y = sum_R x / n                    backward: dx = dy / n
//   var:   y = sum_R (x - m)^2 / max(0, n-c)  backward: dx = dy * 2 (x - m) / (n - c)
//          with m = mean_R x and c = 1 if unbiased else 0; saves x and m (keepdim-shaped).
//   max/min (whole tensor): backward spreads dy evenly over the elements equal to
//          the result, as PyTorch does; saves x and y.
//   max/min (along dim): backward puts dy at the returned index; saves the indices.
//   amax/amin (over dims): backward dx = mask * dy / sum_R mask with mask = (x == y),
//          each reduced slice's ties share dy evenly (PyTorch's rule), composed
//          from eq, sum and the arithmetic ops; saves x and y.
//   argmax: int64, not differentiable.
// Saved non-tensor state: the input shape, the wrapped reduced dims, keepdim.
// Backward returns fresh gradients (the engine accumulates them into .grad).
//
// Kernel layout: each output reduces one "row" of n input elements (kept dims
// pick the row, reduced dims run along it in row-major order). Rows are read
// in place as contiguous segments when the innermost reduced dim has stride 1
// and some length (NCHW over {0, 2, 3}: segments of H*W); otherwise the input
// is first copied with the reduced dims last. Sums whose reduced dims form one
// block followed by kept dims ([A, R, B] with B > 1, e.g. a bias gradient over
// the batch) go to a column kernel instead. How the CPU kernels reduce a row
// (chunks, accumulators): ops/cpu/reduce.cpp.
#include "minidl/ops/reduce.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/binary.h"

namespace minidl {

namespace {

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
  return make_view(x, std::move(shape), std::move(strides), x.storage_offset());
}

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
    r.layout.seg_shape = red;
    r.layout.seg_strides = red_strides;
    r.layout.row_shape = kept;
    r.layout.row_strides = kept_strides;
    r.layout.rows = p.rows;
    // Long segments further apart than rows (NCHW over {0, 2, 3}): read one
    // segment of every row in turn, which walks memory in order. (Short ones
    // would make too many partial results.)
    const int64_t seg_step = red.empty() ? 0 : red_strides.back();
    const int64_t row_step = kept.empty() ? 0 : kept_strides.back();
    if (seg_step > row_step && r.layout.seg_len >= 256 && r.layout.seg_len <= kReduceChunk) {
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
}  // namespace

DispatchStub<SumRowsFn> sum_rows_stub("sum");
DispatchStub<SumColumnsFn> sum_columns_stub("sum_columns");
DispatchStub<VarRowsFn> var_rows_stub("var");
DispatchStub<ExtremumRowsFn> extremum_rows_stub("max/min");
DispatchStub<ExpandBackwardFn> expand_backward_stub("sum_backward");
DispatchStub<VarBackwardFn> var_backward_stub("var_backward");
DispatchStub<IndexBackwardFn> index_backward_stub("max_backward");
DispatchStub<EvenBackwardFn> even_backward_stub("max_backward_all");

namespace {

// ---- op helpers ---------------------------------------------------------------------

void check_input(const Tensor& x, const char* op) {
  MINIDL_CHECK(x.defined(), op, ": expected a defined tensor, got an undefined one");
}

TensorOptions like(const Tensor& x, DType dtype) { return x.options().dtype(dtype); }

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

template <bool kIsMax>
struct ExtremumDims {
  static constexpr const char* kOp = kIsMax ? "amax()" : "amin()";
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Shape& dims, bool keepdim) {
    const ReducePlan p = make_plan(x.shape(), dims, keepdim, kOp);
    MINIDL_CHECK(!(dims.empty() && x.numel() == 0), kOp, ": Expected reduction dim to be specified for "
                 "input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
    for (int64_t d : p.reduced_dims)
      MINIDL_CHECK(p.in_shape[d] > 0, kOp, ": Expected reduction dim ", d, " to have non-zero size.");
    save_plan(ctx, p, keepdim);
    Tensor out = empty(p.out_shape, like(x, x.dtype()));
    const Rows rows = as_rows(x, p);
    extremum_rows_stub(x.device())(rows.base, rows.layout, out, Tensor(), kIsMax);
    ctx->save_for_backward({x, out});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const ReducePlan p = plan_from_saved(ctx, ctx->saved_data["keepdim"].to_bool());
    const auto saved = ctx->get_saved_variables();
    const Tensor& x = saved[0];
    const Tensor mask = eq(x, saved[1].reshape(p.kept_shape));  // 1 where x is the slice's extreme
    const Tensor ties = sum(mask, p.reduced_dims, true);
    return {mask * (grads[0].reshape(p.kept_shape) / ties), Tensor(), Tensor()};
  }
};

}  // namespace

// Node names follow PyTorch's (MaxBackward, AmaxBackward, ...).
namespace reduce_whole {
struct Max : autograd::Function<Max>, ExtremumAll<true> {};
struct Min : autograd::Function<Min>, ExtremumAll<false> {};
}  // namespace reduce_whole
namespace reduce_dim {
struct Max : autograd::Function<Max>, ExtremumDim<true> {};
struct Min : autograd::Function<Min>, ExtremumDim<false> {};
}  // namespace reduce_dim
struct Amax : autograd::Function<Amax>, ExtremumDims<true> {};
struct Amin : autograd::Function<Amin>, ExtremumDims<false> {};

// ---- public API ------------------------------------------------------------------------

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor sum(const Tensor& x_in, const Shape& dims, bool keepdim) {
  const Tensor x = amp::cast_args(amp::AmpOp::sum, x_in)[0];
  check_input(x, "sum");
  return Sum::apply(x, dims, keepdim);
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  check_input(x, "mean");
  MINIDL_CHECK(is_floating(x.dtype()),
               "mean(): could not infer output dtype. Input dtype must be either a floating point "
               "or complex dtype. Got: ", scalar_type_name(x.dtype()));
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

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  check_input(x, "amax");
  return Amax::apply(x, dims, keepdim);
}

Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  check_input(x, "amin");
  return Amin::apply(x, dims, keepdim);
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
