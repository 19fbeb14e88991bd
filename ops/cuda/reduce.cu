// CUDA kernels of the reductions (ops/reduce.h's kernel interface): sum_rows,
// sum_columns, var_rows (two passes: mean, then squared and plain
// deviations, as the CPU kernel), extremum_rows (first index of the max/min,
// NaN propagating) on the row reducer of ops/cuda/row_reduce.cuh (CUB block
// reductions, no atomics, deterministic), and the elementwise backward
// kernels (expand, var, index, even). float32 accumulates in double and
// integers in int64, as on the CPU; float16/bfloat16 as float32 (sums in
// double, elementwise math and max/min compares in float, rounded once on
// store; ops/cuda/opmath.h). The host never reads device memory (the
// tie count of even_backward stays on the device) nor uploads anything (a
// row's segment offsets are computed: reduce_math.h), so every reduction can
// be captured into a CUDA graph. Checked against the CPU
// kernels on an H100: float32/float64/integers (tests/test_cuda_ops,
// 2026-11-26), float16/bfloat16 (tests/test_cuda_ops_half, 2026-11-27); the
// computed segment offsets passed both and test_cuda_graph's captured sums in
// the third H100 run (2026-11-27 18:39).

#include "minidl/ops/cuda/column_reduce.cuh"
#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/reduce_math.h"
#include "minidl/ops/cuda/row_reduce.cuh"
#include "minidl/ops/reduce.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_math::Deviations;
using cuda_math::Offsets;
using cuda_math::RowIndexer;
using cuda_math::ValueIndex;
using cuda_math::opmath_t;
using cuda_math::from_opmath;
using cuda_math::to_opmath;

template <class T>
using acc_t = std::conditional_t<cuda_math::is_floating_v<T>, double, int64_t>;

// The layout on the device (ops/cuda/reduce_math.h).
RowIndexer device_rows(const RowLayout& L, const char* op) {
  RowIndexer idx;
  idx.rows = cuda_kernels::offset_calculator<1>(L.row_shape, {&L.row_strides}, op);
  idx.segs = cuda_kernels::offset_calculator<1>(L.seg_shape, {&L.seg_strides}, op);
  idx.seg_len = L.seg_len < 1 ? 1 : L.seg_len;
  return idx;
}

// Element j of row r, converted to Acc.
template <class T, class Acc>
struct RowLoader {
  const T* x;
  RowIndexer idx;
  using Row = int64_t;
  __device__ Row row(int64_t r) const { return idx.row_start(r); }
  __device__ Acc operator()(Row start, int64_t j) const { return convert<Acc>(x[idx.element(start, j)]); }
};

template <class O, class Acc>
struct ScaledStore {
  O* out;
  double scale;
  __device__ void operator()(int64_t r, int64_t, Acc sum) const {
    out[r] = scale == 1.0 ? convert<O>(sum) : convert<O>(static_cast<double>(sum) * scale);
  }
};

template <class T>
void sum_rows_typed(const Tensor& base, const RowLayout& L, const Tensor& out, double scale) {
  using Acc = acc_t<T>;
  using O = std::conditional_t<cuda_math::is_floating_v<T>, T, int64_t>;
  const LaunchContext ctx(base.device());
  const RowIndexer rows = device_rows(L, "sum");
  cuda_kernels::launch_row_reduce(ctx, L.rows, L.len, Acc(0), RowLoader<T, Acc>{static_cast<const T*>(base.raw_data()), rows},
                                  cuda_kernels::SumOp<Acc>(), ScaledStore<O, Acc>{out.data_ptr<O>(), scale}, "sum");
}

void sum_rows_cuda(const Tensor& base, const RowLayout& rows, const Tensor& out, double scale) {
  MINIDL_CUDA_DISPATCH_ALL_AND_HALF(base.dtype(), "sum", [&] { sum_rows_typed<scalar_t>(base, rows, out, scale); });
}

// x [A, R, B] contiguous: row (a, b) has R elements B apart; many columns go
// a thread each (neighbouring threads read neighbouring b).
template <class T, class Acc>
struct ColumnLoader {
  const T* x;
  int64_t R, B;
  using Row = int64_t;
  __device__ Row row(int64_t r) const { return (r / B) * R * B + r % B; }
  __device__ Acc operator()(Row start, int64_t j) const { return convert<Acc>(x[start + j * B]); }
};

template <class T>
void sum_columns_typed(const Tensor& x, const Tensor& out, double scale) {
  using Acc = acc_t<T>;
  using O = std::conditional_t<cuda_math::is_floating_v<T>, T, int64_t>;
  const int64_t A = x.shape()[0], R = x.shape()[1], B = x.shape()[2];
  const LaunchContext ctx(x.device());
  const ColumnLoader<T, Acc> load{static_cast<const T*>(x.raw_data()), R, B};
  if (A == 1 && B >= cuda_math::ColumnTiling::kCols && cuda_kernels::column_reduce_applies(B, R)) {
    // One block of columns: the tiled column reduction reads each row's
    // neighbouring columns with neighbouring threads (a block per column
    // chunk would read them B apart: a channels-last conv's bias gradient).
    cuda_kernels::launch_column_reduce(ctx, B, R, Acc(0), load, cuda_kernels::SumOp<Acc>(),
                                       ScaledStore<O, Acc>{out.data_ptr<O>(), scale}, "sum");
    return;
  }
  cuda_kernels::launch_row_reduce(ctx, A * B, R, Acc(0), load,
                                  cuda_kernels::SumOp<Acc>(), ScaledStore<O, Acc>{out.data_ptr<O>(), scale}, "sum",
                                  B > 1 ? cuda_kernels::RowAccess::kInterleaved : cuda_kernels::RowAccess::kContiguous);
}

void sum_columns_cuda(const Tensor& x, const Tensor& out, double scale) {
  MINIDL_CUDA_DISPATCH_ALL_AND_HALF(x.dtype(), "sum", [&] { sum_columns_typed<scalar_t>(x, out, scale); });
}

// ---- var: pass 1 writes the float64 row means, pass 2 the deviations ----------

struct MeanStore {
  double* mean;
  double n;
  __device__ void operator()(int64_t r, int64_t, double sum) const { mean[r] = sum / n; }
};

template <class T>
struct DeviationLoader {
  const T* x;
  RowIndexer idx;
  const double* mean;
  struct Row {
    int64_t start;
    double m;
  };
  __device__ Row row(int64_t r) const { return Row{idx.row_start(r), mean[r]}; }
  __device__ Deviations operator()(const Row& row, int64_t j) const {
    const double d = convert<double>(x[idx.element(row.start, j)]) - row.m;
    return Deviations{d * d, d};
  }
};

struct AddDeviations {
  __device__ Deviations operator()(const Deviations& a, const Deviations& b) const {
    return cuda_math::add_deviations(a, b);
  }
};

template <class T>
struct VarStore {
  T* var;
  T* mean;  // optional
  int64_t n, correction;
  template <class Row>
  __device__ void operator()(int64_t r, const Row& row, const Deviations& d) const {
    var[r] = convert<T>(cuda_math::variance_from_deviations(d, n, correction));
    if (mean) mean[r] = convert<T>(row.m);
  }
};

template <class T>
void var_rows_typed(const Tensor& base, const RowLayout& L, const Tensor& var, const Tensor& mean,
                    int64_t correction) {
  const LaunchContext ctx(base.device());
  const RowIndexer rows = device_rows(L, "var");
  const T* x = static_cast<const T*>(base.raw_data());
  Tensor means = cuda_kernels::temp_buffer(L.rows * static_cast<int64_t>(sizeof(double)), base.device());
  auto* m = static_cast<double*>(means.raw_data());
  cuda_kernels::launch_row_reduce(ctx, L.rows, L.len, 0.0, RowLoader<T, double>{x, rows},
                                  cuda_kernels::SumOp<double>(), MeanStore{m, static_cast<double>(L.len)}, "var");
  cuda_kernels::launch_row_reduce(
      ctx, L.rows, L.len, Deviations{}, DeviationLoader<T>{x, rows, m}, AddDeviations(),
      VarStore<T>{var.data_ptr<T>(), mean.defined() ? mean.data_ptr<T>() : nullptr, L.len, correction}, "var");
}

void var_rows_cuda(const Tensor& base, const RowLayout& rows, const Tensor& var, const Tensor& mean,
                   int64_t correction) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(base.dtype(), "var",
                                         [&] { var_rows_typed<scalar_t>(base, rows, var, mean, correction); });
}

// ---- max / min ------------------------------------------------------------------

// Candidates hold opmath_t<T> values (exact for every T): the 16-bit types compare as float.
template <class T>
struct IndexedLoader {
  const T* x;
  RowIndexer idx;
  using Row = int64_t;
  __device__ Row row(int64_t r) const { return idx.row_start(r); }
  __device__ ValueIndex<opmath_t<T>> operator()(Row start, int64_t j) const {
    return ValueIndex<opmath_t<T>>{to_opmath(x[idx.element(start, j)]), j};
  }
};

template <bool kIsMax, class T>
struct PickExtremum {
  __device__ ValueIndex<T> operator()(const ValueIndex<T>& a, const ValueIndex<T>& b) const {
    return cuda_math::pick_extremum<kIsMax>(a, b);
  }
};

template <class T>
struct ExtremumStore {
  T* values;         // optional
  int64_t* indices;  // optional
  __device__ void operator()(int64_t r, int64_t, const ValueIndex<opmath_t<T>>& best) const {
    if (values) values[r] = from_opmath<T>(best.value);
    if (indices) indices[r] = best.index;
  }
};

template <bool kIsMax, class T>
void extremum_rows_typed(const Tensor& base, const RowLayout& L, const Tensor& values, const Tensor& indices,
                         const char* op) {
  const LaunchContext ctx(base.device());
  const RowIndexer rows = device_rows(L, op);
  cuda_kernels::launch_row_reduce(
      ctx, L.rows, L.len, ValueIndex<opmath_t<T>>{opmath_t<T>(), -1},
      IndexedLoader<T>{static_cast<const T*>(base.raw_data()), rows}, PickExtremum<kIsMax, opmath_t<T>>(),
      ExtremumStore<T>{values.defined() ? values.data_ptr<T>() : nullptr,
                       indices.defined() ? indices.data_ptr<int64_t>() : nullptr},
      op);
}

void extremum_rows_cuda(const Tensor& base, const RowLayout& rows, const Tensor& values, const Tensor& indices,
                        bool is_max) {
  const char* op = is_max ? "max" : "min";
  MINIDL_CUDA_DISPATCH_ALL_AND_HALF(base.dtype(), op, [&] {
    if (is_max)
      extremum_rows_typed<true, scalar_t>(base, rows, values, indices, op);
    else
      extremum_rows_typed<false, scalar_t>(base, rows, values, indices, op);
  });
}

// ---- backward kernels (elementwise) --------------------------------------------

template <class T>
struct ScaleFunctor {  // dx = s * g
  T* dx;
  const T* g;
  opmath_t<T> s;
  __device__ void operator()(const Offsets<2>& o) const { dx[o.v[0]] = from_opmath<T>(s * to_opmath(g[o.v[1]])); }
};

void expand_backward_cuda(const Tensor& g, const Tensor& dx, double scale) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(dx.dtype(), "sum_backward", [&] {
    const LaunchContext ctx(dx.device());
    const auto calc = cuda_kernels::offset_calculator<2>(dx.shape(), {&dx.strides(), &g.strides()}, "sum_backward");
    cuda_kernels::launch_elementwise(
        ctx, dx.numel(), calc,
        ScaleFunctor<scalar_t>{dx.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(), static_cast<opmath_t<scalar_t>>(scale)},
        "sum_backward");
  });
}

template <class T>
struct VarBackwardFunctor {  // dx = s * g * (x - m)
  T* dx;
  const T *g, *x, *m;
  opmath_t<T> s;
  __device__ void operator()(const Offsets<4>& o) const {
    dx[o.v[0]] = from_opmath<T>(s * to_opmath(g[o.v[1]]) * (to_opmath(x[o.v[2]]) - to_opmath(m[o.v[3]])));
  }
};

void var_backward_cuda(const Tensor& g, const Tensor& x, const Tensor& m, const Tensor& dx, double scale) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(dx.dtype(), "var_backward", [&] {
    const LaunchContext ctx(dx.device());
    const auto calc = cuda_kernels::offset_calculator<4>(
        dx.shape(), {&dx.strides(), &g.strides(), &x.strides(), &m.strides()}, "var_backward");
    cuda_kernels::launch_elementwise(ctx, dx.numel(), calc,
                                     VarBackwardFunctor<scalar_t>{dx.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(),
                                                                  x.data_ptr<scalar_t>(), m.data_ptr<scalar_t>(),
                                                                  static_cast<opmath_t<scalar_t>>(scale)},
                                     "var_backward");
  });
}

template <class T>
struct IndexBackwardFunctor {  // dx[..., idx, ...] = g (each g element has its own target)
  T* dx;
  const T* g;
  const int64_t* idx;
  int64_t dim_stride;
  __device__ void operator()(const Offsets<3>& o) const { dx[o.v[0] + idx[o.v[2]] * dim_stride] = g[o.v[1]]; }
};

void index_backward_cuda(const Tensor& g, const Tensor& idx, const Tensor& dx, int64_t dim) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(dx.dtype(), "max_backward", [&] {
    const LaunchContext ctx(dx.device());
    const int64_t dim_stride = dx.dim() == 0 ? 0 : dx.strides()[dim];
    const auto calc = cuda_kernels::offset_calculator<3>(g.shape(), {&dx.strides(), &g.strides(), &idx.strides()},
                                                         "max_backward");
    cuda_kernels::launch_elementwise(ctx, g.numel(), calc,
                                     IndexBackwardFunctor<scalar_t>{dx.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(),
                                                                    idx.data_ptr<int64_t>(), dim_stride},
                                     "max_backward");
  });
}

// even_backward: count the elements equal to y (one row reduction into a
// device int64), then dx = hit ? g / count : 0 reading the count there.
template <class T>
MINIDL_HOST_DEVICE inline bool equals_or_both_nan(T v_stored, T target_stored) {
  const opmath_t<T> v = to_opmath(v_stored), target = to_opmath(target_stored);
  return v == target || (cuda_math::is_nan_value(v) && cuda_math::is_nan_value(target));
}

template <class T>
struct HitLoader {
  const T* x;
  const T* y;
  using Row = T;
  __device__ Row row(int64_t) const { return *y; }
  __device__ int64_t operator()(T target, int64_t j) const { return equals_or_both_nan(x[j], target) ? 1 : 0; }
};

struct CountStore {
  int64_t* count;
  template <class Row>
  __device__ void operator()(int64_t, const Row&, int64_t n) const { *count = n; }
};

template <class T>
struct EvenShareFunctor {
  T* dx;
  const T *x, *y, *g;
  const int64_t* count;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    using C = opmath_t<T>;
    dx[i] = from_opmath<T>(equals_or_both_nan(x[i], *y) ? to_opmath(*g) / static_cast<C>(*count) : C(0));
  }
};

void even_backward_cuda(const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& dx) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(dx.dtype(), "max_backward", [&] {
    const LaunchContext ctx(dx.device());
    const int64_t n = x.numel();  // x and dx contiguous
    Tensor count = cuda_kernels::temp_buffer(sizeof(int64_t), dx.device());
    auto* c = static_cast<int64_t*>(count.raw_data());
    const auto* xp = x.data_ptr<scalar_t>();
    const auto* yp = y.data_ptr<scalar_t>();
    cuda_kernels::launch_row_reduce(ctx, 1, n, int64_t(0), HitLoader<scalar_t>{xp, yp},
                                    cuda_kernels::SumOp<int64_t>(), CountStore{c}, "max_backward");
    const Shape shape{n}, strides{1};
    const auto calc = cuda_kernels::offset_calculator<1>(shape, {&strides}, "max_backward");
    cuda_kernels::launch_elementwise(
        ctx, n, calc, EvenShareFunctor<scalar_t>{dx.data_ptr<scalar_t>(), xp, yp, g.data_ptr<scalar_t>(), c},
        "max_backward");
  });
}

}  // namespace

void register_reduce_cuda_kernels() {
  sum_rows_stub.set(DeviceType::CUDA, sum_rows_cuda);
  sum_columns_stub.set(DeviceType::CUDA, sum_columns_cuda);
  var_rows_stub.set(DeviceType::CUDA, var_rows_cuda);
  extremum_rows_stub.set(DeviceType::CUDA, extremum_rows_cuda);
  expand_backward_stub.set(DeviceType::CUDA, expand_backward_cuda);
  var_backward_stub.set(DeviceType::CUDA, var_backward_cuda);
  index_backward_stub.set(DeviceType::CUDA, index_backward_cuda);
  even_backward_stub.set(DeviceType::CUDA, even_backward_cuda);
}

}  // namespace minidl
