// CUDA kernels of softmax and log_softmax (ops/softmax.h's kernel
// interface), contiguous (outer, D, inner) tensors. Forward: the column max
// and the float64 sum of exp(x - max) on the row reducer (CUB, no atomics),
// then an elementwise pass; backward: the column sum (of g, or g * y), then
// an elementwise pass. Math in ops/cuda/softmax_math.h, shared with the CPU
// tests. float16/bfloat16: max, column sums rounded as float32's and the
// elementwise math in float, rounded once on store (ops/cuda/opmath.h), as
// the CPU kernel through Float32Compute. Checked against the CPU kernels on an
// H100: float32/float64 (tests/test_cuda_ops, 2026-11-26), float16/bfloat16
// (tests/test_cuda_ops_half, 2026-11-27).
#include <limits>

#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/row_reduce.cuh"
#include "minidl/ops/cuda/softmax_math.h"
#include "minidl/ops/softmax.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::Offsets;
using cuda_math::SoftmaxShape;
using cuda_math::from_opmath;
using cuda_math::opmath_t;
using cuda_math::to_opmath;

SoftmaxShape shape_of(const Shape& shape, int64_t dim) {
  SoftmaxShape g;
  if (shape.empty()) return g;  // a 0-d tensor is one column of one element
  for (int64_t d = 0; d < dim; ++d) g.outer *= shape[d];
  g.dim_size = shape[dim];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) g.inner *= shape[d];
  return g.with_dividers();
}

// Softmax over an inner dim: neighbouring columns are neighbours in memory.
cuda_kernels::RowAccess access_of(const SoftmaxShape& g) {
  return g.inner > 1 ? cuda_kernels::RowAccess::kInterleaved : cuda_kernels::RowAccess::kContiguous;
}

// Column c's D elements, in the compute type (exact).
template <class T>
struct ColumnMaxLoader {
  const T* x;
  SoftmaxShape g;
  using Row = int64_t;
  __device__ Row row(int64_t c) const { return g.column_start(c); }
  __device__ opmath_t<T> operator()(Row start, int64_t j) const { return to_opmath(x[start + j * g.inner]); }
};

template <class T>
struct MaxOp {  // as std::max on the CPU: a NaN input makes the column NaN through the sum anyway
  __device__ T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};

template <class T>
struct StoreTo {
  T* out;
  __device__ void operator()(int64_t c, int64_t, T v) const { out[c] = v; }
};

template <class T>
struct ExpSumLoader {
  const T* x;
  const opmath_t<T>* max;
  SoftmaxShape g;
  struct Row {
    int64_t start;
    opmath_t<T> max;
  };
  __device__ Row row(int64_t c) const { return Row{g.column_start(c), max[c]}; }
  __device__ double operator()(const Row& row, int64_t j) const {
    return static_cast<double>(std::exp(to_opmath(x[row.start + j * g.inner]) - row.max));
  }
};

// The column's output factor (cuda_math::softmax_column_factor) from its sum.
template <class C>
struct FactorStore {
  C* factor;
  bool log;
  template <class Row>
  __device__ void operator()(int64_t c, const Row& row, double sum) const {
    factor[c] = cuda_math::softmax_column_factor<C>(row.max, sum, log);
  }
};

template <class T>
struct SoftmaxOutput {
  T* y;
  const T* x;
  const opmath_t<T>*max, *factor;
  SoftmaxShape g;
  bool log;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0], c = g.column_of(i);
    const opmath_t<T> m = log ? opmath_t<T>(0) : max[c];  // log_softmax needs its factor only
    y[i] = from_opmath<T>(cuda_math::softmax_output_with<opmath_t<T>>(to_opmath(x[i]), m, factor[c], log));
  }
};

// for i in [0, n) of a contiguous tensor.

template <class T>
void forward_typed(const Tensor& x, const Tensor& y, const SoftmaxShape& g, bool log, const char* op) {
  using C = opmath_t<T>;
  const int64_t columns = g.outer * g.inner, n = x.numel();
  if (n == 0) return;
  const LaunchContext ctx(x.device());
  Tensor max_buf = cuda_kernels::temp_buffer(columns * static_cast<int64_t>(sizeof(C)), x.device());
  Tensor factor_buf = cuda_kernels::temp_buffer(columns * static_cast<int64_t>(sizeof(C)), x.device());
  auto* mx = static_cast<C*>(max_buf.raw_data());
  auto* factor = static_cast<C*>(factor_buf.raw_data());
  const T* xp = x.data_ptr<T>();
  cuda_kernels::launch_row_reduce(ctx, columns, g.dim_size, -std::numeric_limits<C>::infinity(),
                                  ColumnMaxLoader<T>{xp, g}, MaxOp<C>(), StoreTo<C>{mx}, op, access_of(g));
  cuda_kernels::launch_row_reduce(ctx, columns, g.dim_size, 0.0, ExpSumLoader<T>{xp, mx, g},
                                  cuda_kernels::SumOp<double>(), FactorStore<C>{factor, log}, op, access_of(g));
  cuda_kernels::launch_elementwise(ctx, n, linear(n, op), SoftmaxOutput<T>{y.data_ptr<T>(), xp, mx, factor, g, log},
                                   op);
}

void softmax_forward_cuda(const Tensor& x, const Tensor& y, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  const SoftmaxShape g = shape_of(x.shape(), dim);
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(x.dtype(), op, [&] { forward_typed<scalar_t>(x, y, g, log, op); });
}

template <class T>
struct BackwardSumLoader {
  const T* gy;
  const T* y;
  SoftmaxShape g;
  bool log;
  using Row = int64_t;
  __device__ Row row(int64_t c) const { return g.column_start(c); }
  __device__ double operator()(Row start, int64_t j) const {
    const int64_t k = start + j * g.inner;
    return cuda_math::softmax_backward_term<opmath_t<T>>(to_opmath(gy[k]), to_opmath(y[k]), log);
  }
};

template <class T>
struct RoundedStore {  // the column sum rounded to T (float for the 16-bit types), as the CPU kernel
  T* out;
  __device__ void operator()(int64_t c, int64_t, double v) const { out[c] = static_cast<T>(v); }
};

template <class T>
struct SoftmaxBackwardOutput {
  T* gx;
  const T* gy;
  const T* y;
  const opmath_t<T>* s;
  SoftmaxShape g;
  bool log;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    gx[i] = from_opmath<T>(
        cuda_math::softmax_backward_input<opmath_t<T>>(to_opmath(gy[i]), to_opmath(y[i]), s[g.column_of(i)], log));
  }
};

template <class T>
void backward_typed(const Tensor& grad_y, const Tensor& y, const Tensor& grad_x, const SoftmaxShape& g, bool log,
                    const char* op) {
  using C = opmath_t<T>;
  const int64_t columns = g.outer * g.inner, n = y.numel();
  if (n == 0) return;
  const LaunchContext ctx(y.device());
  Tensor sum_buf = cuda_kernels::temp_buffer(columns * static_cast<int64_t>(sizeof(C)), y.device());
  auto* s = static_cast<C*>(sum_buf.raw_data());
  const T* gy = grad_y.data_ptr<T>();
  const T* yp = y.data_ptr<T>();
  cuda_kernels::launch_row_reduce(ctx, columns, g.dim_size, 0.0, BackwardSumLoader<T>{gy, yp, g, log},
                                  cuda_kernels::SumOp<double>(), RoundedStore<C>{s}, op, access_of(g));
  cuda_kernels::launch_elementwise(ctx, n, linear(n, op),
                                   SoftmaxBackwardOutput<T>{grad_x.data_ptr<T>(), gy, yp, s, g, log}, op);
}

void softmax_backward_cuda(const Tensor& grad_y, const Tensor& y, const Tensor& grad_x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  const SoftmaxShape g = shape_of(y.shape(), dim);
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(y.dtype(), op,
                                         [&] { backward_typed<scalar_t>(grad_y, y, grad_x, g, log, op); });
}

}  // namespace

void register_softmax_cuda_kernels() {
  softmax_forward_stub.set(DeviceType::CUDA, softmax_forward_cuda);
  softmax_backward_stub.set(DeviceType::CUDA, softmax_backward_cuda);
}

}  // namespace minidl
