// CUDA kernels of the elementwise binary ops (ops/binary.h's kernel
// interface): binary_stub (broadcast operands arrive as stride-0 views),
// binary_scalar_stub (the scalar is a kernel argument) and sum_to_stub (the
// broadcast-gradient reduction, out += grad summed over the broadcast dims,
// without atomics). The math is ops/cuda/elementwise_math.h, shared with the
// CPU tests; dtypes as the CPU kernels: div floating only, the rest also
// int64/uint8; float16/bfloat16 computed in float and rounded once
// (ops/cuda/opmath.h), sum_to_shape accumulating them in double as float32.
// Checked against the CPU kernels on an H100: float32/float64/integers
// (tests/test_cuda_ops, 2026-11-26), float16/bfloat16 (tests/test_cuda_ops_half, 2026-11-27).
// The contiguous 16-byte vector path (launch_contiguous_map, same per-element
// function) passed both suites in run C (2026-11-27, bench/RESULTS.md);
// test_cuda_ops' vector-tail and unaligned-view cases passed in the third H100 run (2026-11-27 18:39).
#include "minidl/ops/binary.h"
#include "minidl/ops/cuda/elementwise_math.h"
#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/row_reduce.cuh"
#include "minidl/ops/cuda/vectorized.cuh"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_math::Offsets;

// One element's value, for the strided functors and the contiguous path
// (cuda_kernels::launch_contiguous_map) alike.
template <class T>
struct BinaryElem {
  BinaryOp op;
  cuda_math::opmath_t<T> alpha;
  bool alpha_is_one;
  __device__ T operator()(T a, T b) const { return cuda_math::binary_apply_stored<T>(op, alpha, alpha_is_one, a, b); }
};

template <class T>
struct BinaryScalarElem {
  BinaryOp op;
  cuda_math::opmath_t<T> scalar;  // the CPU's float32 kernel takes a float scalar for the 16-bit types too
  bool scalar_first;
  __device__ T operator()(T a) const {
    using C = cuda_math::opmath_t<T>;
    const C x = cuda_math::to_opmath(a);
    return cuda_math::from_opmath<T>(scalar_first ? cuda_math::binary_apply<C>(op, C(1), true, scalar, x)
                                                  : cuda_math::binary_apply<C>(op, C(1), true, x, scalar));
  }
};

template <class T>
struct BinaryFunctor {
  T* out;
  const T* a;
  const T* b;
  BinaryElem<T> e;
  __device__ void operator()(const Offsets<3>& o) const { out[o.v[0]] = e(a[o.v[1]], b[o.v[2]]); }
};

template <class T>
struct BinaryScalarFunctor {
  T* out;
  const T* a;
  BinaryScalarElem<T> e;
  __device__ void operator()(const Offsets<2>& o) const { out[o.v[0]] = e(a[o.v[1]]); }
};

template <class T>
void binary_cuda_typed(BinaryOp op, double alpha, const Tensor& out, const Tensor& a, const Tensor& b) {
  const LaunchContext ctx(out.device());
  const BinaryElem<T> e{op, static_cast<cuda_math::opmath_t<T>>(alpha), alpha == 1.0};
  if (cuda_kernels::launch_contiguous_map<T>(ctx, out, a, b, e, binary_op_name(op))) return;
  const auto calc = cuda_kernels::offset_calculator<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()},
                                                       binary_op_name(op));
  const BinaryFunctor<T> f{static_cast<T*>(out.raw_data()), static_cast<const T*>(a.raw_data()),
                           static_cast<const T*>(b.raw_data()), e};
  cuda_kernels::launch_elementwise(ctx, out.numel(), calc, f, binary_op_name(op));
}

void binary_cuda(BinaryOp op, double alpha, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (op == BinaryOp::Div) {  // integer division is not offered (as the CPU kernel)
    MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(out.dtype(), "div",
                                           [&] { binary_cuda_typed<scalar_t>(op, alpha, out, a, b); });
  } else {
    MINIDL_CUDA_DISPATCH_ALL_AND_HALF(out.dtype(), binary_op_name(op),
                                      [&] { binary_cuda_typed<scalar_t>(op, alpha, out, a, b); });
  }
}

template <class T>
void binary_scalar_cuda_typed(BinaryOp op, const Tensor& out, const Tensor& a, double scalar, bool scalar_first) {
  const LaunchContext ctx(out.device());
  const BinaryScalarElem<T> e{op, static_cast<cuda_math::opmath_t<T>>(scalar), scalar_first};
  if (cuda_kernels::launch_contiguous_map<T>(ctx, out, a, e, binary_op_name(op))) return;
  const auto calc =
      cuda_kernels::offset_calculator<2>(out.shape(), {&out.strides(), &a.strides()}, binary_op_name(op));
  const BinaryScalarFunctor<T> f{static_cast<T*>(out.raw_data()), static_cast<const T*>(a.raw_data()), e};
  cuda_kernels::launch_elementwise(ctx, out.numel(), calc, f, binary_op_name(op));
}

void binary_scalar_cuda(BinaryOp op, const Tensor& out, const Tensor& a, double scalar, bool scalar_first) {
  if (op == BinaryOp::Div) {
    MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(out.dtype(), "div",
                                           [&] { binary_scalar_cuda_typed<scalar_t>(op, out, a, scalar, scalar_first); });
  } else {
    MINIDL_CUDA_DISPATCH_ALL_AND_HALF(out.dtype(), binary_op_name(op),
                                      [&] { binary_scalar_cuda_typed<scalar_t>(op, out, a, scalar, scalar_first); });
  }
}

// ---- sum_to_shape ------------------------------------------------------------
// Row r = one output element (the kept dims); its elements are the grad
// elements along the broadcast dims (out_view stride 0, size > 1).

template <class T, class Acc>
struct SumToLoader {
  const T* grad;
  cuda_math::OffsetCalculator<2> kept;     // {out offset, grad offset} of row r
  cuda_math::OffsetCalculator<1> reduced;  // grad offset of element j within a row
  using Row = Offsets<2>;
  __device__ Row row(int64_t r) const { return kept.get(r); }
  __device__ Acc operator()(const Row& row, int64_t j) const {
    return convert<Acc>(grad[row.v[1] + reduced.get(j).v[0]]);
  }
};

template <class T, class Acc>
struct SumToFinish {
  T* out;
  __device__ void operator()(int64_t, const Offsets<2>& row, Acc acc) const {
    out[row.v[0]] = convert<T>(convert<Acc>(out[row.v[0]]) + acc);
  }
};

template <class T>
void sum_to_cuda_typed(const Tensor& out_view, const Tensor& grad) {
  // float (and float16/bfloat16) accumulates in double, as the CPU kernel; integers in int64.
  using Acc = std::conditional_t<cuda_math::is_floating_v<T>, double, int64_t>;
  const Shape& shape = grad.shape();
  Shape kept_shape, kept_out, kept_grad, red_shape, red_grad;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return;  // empty grad: out stays as it is
    if (out_view.strides()[d] == 0 && shape[d] > 1) {
      red_shape.push_back(shape[d]);
      red_grad.push_back(grad.strides()[d]);
    } else {
      kept_shape.push_back(shape[d]);
      kept_out.push_back(out_view.strides()[d]);
      kept_grad.push_back(grad.strides()[d]);
    }
  }
  const LaunchContext ctx(grad.device());
  const SumToLoader<T, Acc> load{static_cast<const T*>(grad.raw_data()),
                                 cuda_kernels::offset_calculator<2>(kept_shape, {&kept_out, &kept_grad}, "sum_to_shape"),
                                 cuda_kernels::offset_calculator<1>(red_shape, {&red_grad}, "sum_to_shape")};
  const SumToFinish<T, Acc> finish{static_cast<T*>(out_view.raw_data())};
  cuda_kernels::launch_row_reduce(ctx, numel_of(kept_shape), numel_of(red_shape), Acc(0), load,
                                  cuda_kernels::SumOp<Acc>(), finish, "sum_to_shape");
}

void sum_to_cuda(const Tensor& out_view, const Tensor& grad) {
  MINIDL_CUDA_DISPATCH_ALL_AND_HALF(grad.dtype(), "sum_to_shape", [&] { sum_to_cuda_typed<scalar_t>(out_view, grad); });
}

}  // namespace

void register_binary_cuda_kernels() {
  binary_stub.set(DeviceType::CUDA, binary_cuda);
  binary_scalar_stub.set(DeviceType::CUDA, binary_scalar_cuda);
  sum_to_stub.set(DeviceType::CUDA, sum_to_cuda);
  // fill_stub: ops/cuda/fill.cu.
}

}  // namespace minidl
