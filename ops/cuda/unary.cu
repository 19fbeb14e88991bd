// CUDA kernels of the elementwise unary ops and activations (ops/unary.h's
// kernel interface): unary_stub (y = f(x), any strides) and
// unary_backward_stub (dx = g * f'(saved)). The math is
// ops/cuda/elementwise_math.h, shared with the CPU tests; dtypes as the CPU
// kernels (neg, abs, clamp, relu also on int64/uint8; the rest and every
// backward floating only), plus float16/bfloat16 wherever float32 is taken,
// computed in float and rounded once (ops/cuda/opmath.h). Checked against the
// CPU kernels on an H100: float32/float64/integers (tests/test_cuda_ops,
// 2026-11-26); float16/bfloat16 for relu, leaky_relu, gelu, sigmoid, tanh,
// neg, abs, clamp and their backward (tests/test_cuda_ops_half, 2026-11-27).
// exp, log, sqrt, rsqrt, pow and tanh-gelu in 16 bits: compiled, not run on a GPU.
// The contiguous 16-byte vector path (launch_contiguous_map, same per-element
// function) passed both suites in run C (2026-11-27, bench/RESULTS.md);
// test_cuda_ops' vector-tail and unaligned-view cases passed in the third H100 run (2026-11-27 18:39).
#include "minidl/ops/cuda/elementwise_math.h"
#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/vectorized.cuh"
#include "minidl/ops/unary.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_math::Offsets;
using cuda_math::UnaryArgs;

bool runs_on_integers(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Clamp || op == UnaryOp::Relu;
}

// One element's value, for the strided functors and the contiguous path
// (cuda_kernels::launch_contiguous_map) alike.
template <class T>
struct UnaryElem {
  UnaryOp op;
  UnaryArgs<cuda_math::opmath_t<T>> args;
  __device__ T operator()(T x) const { return cuda_math::unary_forward_stored<T>(op, args, x); }
};

template <class T>
struct UnaryBackwardElem {
  UnaryOp op;
  UnaryArgs<cuda_math::opmath_t<T>> args;
  __device__ T operator()(T grad, T saved) const { return cuda_math::unary_backward_stored<T>(op, args, grad, saved); }
};

template <class T>
struct UnaryFunctor {
  T* out;
  const T* x;
  UnaryElem<T> e;
  __device__ void operator()(const Offsets<2>& o) const { out[o.v[0]] = e(x[o.v[1]]); }
};

template <class T>
struct UnaryBackwardFunctor {
  T* dx;
  const T* grad;
  const T* saved;
  UnaryBackwardElem<T> e;
  __device__ void operator()(const Offsets<3>& o) const { dx[o.v[0]] = e(grad[o.v[1]], saved[o.v[2]]); }
};

template <class T>
void unary_cuda_typed(UnaryOp op, const UnaryParams& p, const Tensor& out, const Tensor& x) {
  const LaunchContext ctx(out.device());
  const UnaryElem<T> e{op, cuda_math::make_unary_args<cuda_math::opmath_t<T>>(p)};
  if (cuda_kernels::launch_contiguous_map<T>(ctx, out, x, e, unary_op_name(op))) return;
  const auto calc = cuda_kernels::offset_calculator<2>(out.shape(), {&out.strides(), &x.strides()}, unary_op_name(op));
  const UnaryFunctor<T> f{static_cast<T*>(out.raw_data()), static_cast<const T*>(x.raw_data()), e};
  cuda_kernels::launch_elementwise(ctx, out.numel(), calc, f, unary_op_name(op));
}

template <class T>
void unary_backward_cuda_typed(UnaryOp op, const UnaryParams& p, const Tensor& dx, const Tensor& grad,
                               const Tensor& saved) {
  const LaunchContext ctx(dx.device());
  const UnaryBackwardElem<T> e{op, cuda_math::make_unary_args<cuda_math::opmath_t<T>>(p)};
  if (cuda_kernels::launch_contiguous_map<T>(ctx, dx, grad, saved, e, unary_op_name(op))) return;
  const auto calc = cuda_kernels::offset_calculator<3>(dx.shape(), {&dx.strides(), &grad.strides(), &saved.strides()},
                                                       unary_op_name(op));
  const UnaryBackwardFunctor<T> f{static_cast<T*>(dx.raw_data()), static_cast<const T*>(grad.raw_data()),
                                  static_cast<const T*>(saved.raw_data()), e};
  cuda_kernels::launch_elementwise(ctx, dx.numel(), calc, f, unary_op_name(op));
}

void unary_cuda(UnaryOp op, const UnaryParams& p, const Tensor& out, const Tensor& x) {
  if (runs_on_integers(op)) {
    MINIDL_CUDA_DISPATCH_ALL_AND_HALF(x.dtype(), unary_op_name(op), [&] { unary_cuda_typed<scalar_t>(op, p, out, x); });
  } else {
    MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(x.dtype(), unary_op_name(op),
                                           [&] { unary_cuda_typed<scalar_t>(op, p, out, x); });
  }
}

void unary_backward_cuda(UnaryOp op, const UnaryParams& p, const Tensor& dx, const Tensor& grad,
                         const Tensor& saved) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(grad.dtype(), unary_op_name(op),
                                         [&] { unary_backward_cuda_typed<scalar_t>(op, p, dx, grad, saved); });
}

}  // namespace

void register_unary_cuda_kernels() {
  unary_stub.set(DeviceType::CUDA, unary_cuda);
  unary_backward_stub.set(DeviceType::CUDA, unary_backward_cuda);
}

}  // namespace minidl
