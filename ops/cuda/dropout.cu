// CUDA kernels of dropout (ops/dropout.h's kernel interface). The mask comes
// from counter-based Philox4x32-10 (ops/cuda/philox.h): one 64-bit seed drawn
// from the generator per call, element i's number a function of (seed, i)
// only, so the same seed gives the same mask on every run and launch
// geometry. Unlike the CPU kernel, which draws one number per element, the
// generator advances by one draw per call (PyTorch's CUDA generator also
// advances by an offset, not per element); CPU and CUDA masks differ for
// the same seed. float16/bfloat16: the mask value and x * mask in float,
// each rounded once (ops/cuda/opmath.h), as the CPU kernel through
// Float32Compute. Checked on an H100: float32/float64 (tests/test_cuda_ops,
// 2026-11-26), float16/bfloat16 (tests/test_cuda_ops_half, 2026-11-27).
#include "minidl/core/generator.h"
#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/philox.h"
#include "minidl/ops/dropout.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::Offsets;
using cuda_math::opmath_t;
using cuda_math::from_opmath;
using cuda_math::to_opmath;


template <class T>
struct DropoutFunctor {
  const T* x;
  T* y;
  T* mask;
  uint64_t seed;
  double p;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    const opmath_t<T> m = static_cast<opmath_t<T>>(cuda_math::dropout_mask_value(seed, static_cast<uint64_t>(i), p));
    mask[i] = from_opmath<T>(m);
    y[i] = from_opmath<T>(to_opmath(x[i]) * m);
  }
};

template <class T>
struct MulFunctor {
  const T *a, *b;
  T* out;
  __device__ void operator()(const Offsets<1>& o) const {
    out[o.v[0]] = from_opmath<T>(to_opmath(a[o.v[0]]) * to_opmath(b[o.v[0]]));
  }
};

void dropout_forward_cuda(const Tensor& x, const Tensor& y, const Tensor& mask, double p, Generator& gen) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(x.dtype(), "dropout", [&] {
    const uint64_t seed = gen.next_u64();  // host-side draw: no device round trip
    const LaunchContext ctx(x.device());
    const int64_t n = x.numel();
    cuda_kernels::launch_elementwise(ctx, n, linear(n, "dropout"),
                                     DropoutFunctor<scalar_t>{x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                                              mask.data_ptr<scalar_t>(), seed, p},
                                     "dropout");
  });
}

void dropout_backward_cuda(const Tensor& grad_y, const Tensor& mask, const Tensor& grad_x) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(mask.dtype(), "dropout_backward", [&] {
    const LaunchContext ctx(mask.device());
    const int64_t n = mask.numel();
    cuda_kernels::launch_elementwise(
        ctx, n, linear(n, "dropout_backward"),
        MulFunctor<scalar_t>{grad_y.data_ptr<scalar_t>(), mask.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>()},
        "dropout_backward");
  });
}

}  // namespace

void register_dropout_cuda_kernels() {
  dropout_forward_stub.set(DeviceType::CUDA, dropout_forward_cuda);
  dropout_backward_stub.set(DeviceType::CUDA, dropout_backward_cuda);
}

}  // namespace minidl
