// CUDA kernels of ops/fused_optim.h's single-tensor path: SGD and
// Adam/AdamW steps (a thread per element of one parameter; the multi-tensor
// path is ops/cuda/fused_optim_multi.cu), the vector norm for
// clip_grad_norm_ (the CUB row reducer, double, no atomics) and the clip
// scaling, which reads the total norm on the device (no host round trip).
// float32/float64, and float16/bfloat16 computed in float (a half model,
// Apex's O3). Math in ops/cuda/optim_math.h, shared with the CPU tests.
// float32/float64 checked against the CPU kernels on an H100
// (tests/test_cuda_ops, 2026-11-26); in 16 bits only the clip scaling ran there
// (strided gradients, tests/test_cuda_multi_tensor, 2026-11-27): the 16-bit
// SGD, Adam and vector_norm kernels are compiled, not run on a GPU (the
// optimizers take the multi-tensor path).
#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/multi_tensor_math.h"
#include "minidl/ops/cuda/optim_math.h"
#include "minidl/ops/cuda/row_reduce.cuh"
#include "minidl/ops/fused_optim.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::Offsets;


template <class T>
struct SgdFunctor {
  T* p;
  const T* g;
  T* buf;
  cuda_math::SgdScalars<cuda_math::opmath_t<T>> s;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    cuda_math::sgd_update(s, p[i], g[i], buf ? buf + i : nullptr);
  }
};

void sgd_step_cuda(const SgdStepArgs& a) {
  MINIDL_CHECK(!a.lr_tensor.defined(), "sgd_step: lr_tensor (capturable) is for the multi-tensor path only");
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(a.param.dtype(), "SGD", [&] {
    using T = scalar_t;
    using C = cuda_math::opmath_t<T>;
    const LaunchContext ctx(a.param.device());
    const int64_t n = a.param.numel();
    const bool has_buf = a.momentum_buffer.defined();
    const cuda_math::SgdScalars<C> s{static_cast<C>(a.weight_decay), static_cast<C>(a.momentum),
                                     static_cast<C>(1.0 - a.dampening), static_cast<C>(-a.lr),
                                     a.weight_decay != 0.0, a.nesterov, a.first_step, has_buf};
    cuda_kernels::launch_elementwise(ctx, n, linear(n, "SGD"),
                                     SgdFunctor<T>{a.param.data_ptr<T>(), a.grad.data_ptr<T>(),
                                                   has_buf ? a.momentum_buffer.data_ptr<T>() : nullptr, s},
                                     "SGD");
  });
}

template <class T>
struct AdamFunctor {
  T* p;
  const T* g;
  T *m, *v, *v_max;
  cuda_math::AdamScalars<cuda_math::opmath_t<T>> s;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t i = o.v[0];
    cuda_math::adam_update(s, p[i], g[i], m[i], v[i], v_max ? v_max + i : nullptr);
  }
};

void adam_step_cuda(const AdamStepArgs& a) {
  MINIDL_CHECK(!a.lr_tensor.defined() && !a.step_tensor.defined(),
               "adam_step: lr_tensor and step_tensor (capturable) are for the multi-tensor path only");
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(a.param.dtype(), "Adam", [&] {
    using T = scalar_t;
    using C = cuda_math::opmath_t<T>;
    const LaunchContext ctx(a.param.device());
    const int64_t n = a.param.numel();
    const bool ams = a.max_exp_avg_sq.defined();
    const cuda_math::AdamScalars<C> s{static_cast<C>(a.weight_decay), static_cast<C>(1.0 - a.lr * a.weight_decay),
                                      static_cast<C>(1.0 - a.beta1),   static_cast<C>(a.beta2),
                                      static_cast<C>(1.0 - a.beta2),   static_cast<C>(a.bias_correction2_sqrt),
                                      static_cast<C>(a.eps),           static_cast<C>(-a.step_size),
                                      a.weight_decay != 0.0,           a.decoupled_weight_decay,
                                      ams};
    cuda_kernels::launch_elementwise(
        ctx, n, linear(n, "Adam"),
        AdamFunctor<T>{a.param.data_ptr<T>(), a.grad.data_ptr<T>(), a.exp_avg.data_ptr<T>(), a.exp_avg_sq.data_ptr<T>(),
                       ams ? a.max_exp_avg_sq.data_ptr<T>() : nullptr, s},
        "Adam");
  });
}

template <class T>
struct NormLoader {
  const T* x;
  double p;
  using Row = int64_t;
  __device__ Row row(int64_t) const { return 0; }
  __device__ double operator()(Row, int64_t i) const {
    return cuda_math::norm_term(static_cast<double>(cuda_math::to_opmath(x[i])), p);
  }
};

struct NormStore {
  double* out;
  double p;
  __device__ void operator()(int64_t, int64_t, double acc) const { *out = cuda_math::norm_finish(acc, p); }
};

void vector_norm_cuda(const Tensor& out, const Tensor& x, double norm_type) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(x.dtype(), "vector_norm", [&] {
    const LaunchContext ctx(x.device());
    cuda_kernels::launch_row_reduce(ctx, 1, x.numel(), 0.0, NormLoader<scalar_t>{x.data_ptr<scalar_t>(), norm_type},
                                    cuda_math::NormCombine{std::isinf(norm_type)}, NormStore{out.data_ptr<double>(), norm_type},
                                    "vector_norm");
  });
}

template <class T>
struct ClipFunctor {
  T* g;
  const double* total;
  double max_norm;
  __device__ void operator()(const Offsets<1>& o) const {
    cuda_math::clip_scale(g[o.v[0]], cuda_math::clip_factor<T>(max_norm, *total));
  }
};

void clip_grad_scale_cuda(const Tensor& grad, const Tensor& total_norm, double max_norm) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(grad.dtype(), "clip_grad_norm_", [&] {
    const LaunchContext ctx(grad.device());
    const int64_t n = grad.numel();
    cuda_kernels::launch_elementwise(
        ctx, n, linear(n, "clip_grad_norm_"),
        ClipFunctor<scalar_t>{grad.data_ptr<scalar_t>(), total_norm.data_ptr<double>(), max_norm}, "clip_grad_norm_");
  });
}

}  // namespace

void register_fused_optim_cuda_kernels() {
  sgd_step_stub.set(DeviceType::CUDA, sgd_step_cuda);
  adam_step_stub.set(DeviceType::CUDA, adam_step_cuda);
  vector_norm_stub.set(DeviceType::CUDA, vector_norm_cuda);
  clip_grad_scale_stub.set(DeviceType::CUDA, clip_grad_scale_cuda);
}

}  // namespace minidl
