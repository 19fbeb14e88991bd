// Inverted dropout.
//   training, 0 < p < 1:  keep_i ~ Bernoulli(1 - p),  y = x * keep / (1 - p)
//   training, p == 1:     y = 0 (no random draws)
//   eval, or p == 0:      y = x (the same tensor is returned; nothing recorded)
//   backward:             dx = dy * keep / (1 - p)
// Forward saves the scaled mask m = keep / (1 - p) (same dtype as x), so
// backward is one multiply. Backward returns a fresh gradient tensor.
//
// The mask comes from minidl::default_generator(), one uniform draw per element
// in row-major order (keep when u >= p), so manual_seed(s) reproduces it.
#include "ops/dropout.h"

#include <cmath>

#include "core/autograd/function.h"
#include "core/dispatch.h"
#include "core/generator.h"

namespace minidl {

namespace {

// Draws the mask serially (the generator is a sequential stream) and applies
// it in parallel.
template <class T>
void dropout_forward_kernel(const T* x, T* y, T* mask, int64_t n, double p, Generator& gen) {
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  for (int64_t i = 0; i < n; ++i) mask[i] = gen.uniform() >= p ? scale : T(0);
#pragma omp parallel for schedule(static) if (n >= 32768)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * mask[i];
}

template <class T>
void mul_kernel(const T* a, const T* b, T* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= 32768)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

using DropoutForwardFn = void(const Tensor& x, const Tensor& y, const Tensor& mask, double p, Generator& gen);
using DropoutBackwardFn = void(const Tensor& grad_y, const Tensor& mask, const Tensor& grad_x);

DispatchStub<DropoutForwardFn> dropout_forward_stub("dropout");
DispatchStub<DropoutBackwardFn> dropout_backward_stub("dropout_backward");

void dropout_forward_cpu(const Tensor& x, const Tensor& y, const Tensor& mask, double p, Generator& gen) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "dropout", [&] {
    dropout_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), mask.data_ptr<scalar_t>(), x.numel(), p,
                           gen);
  });
}

void dropout_backward_cpu(const Tensor& grad_y, const Tensor& mask, const Tensor& grad_x) {
  MINIDL_DISPATCH_FLOATING(mask.dtype(), "dropout_backward", [&] {
    mul_kernel(grad_y.data_ptr<scalar_t>(), mask.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), mask.numel());
  });
}

struct DropoutFunction : autograd::Function<DropoutFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double p) {
    const TensorOptions options = TensorOptions(x.dtype()).device(x.device());
    Tensor mask = p == 1.0 ? zeros(x.shape(), options) : empty(x.shape(), options);
    Tensor y;
    if (p == 1.0) {
      y = zeros(x.shape(), options);
    } else {
      y = empty(x.shape(), options);
      if (x.numel() > 0) dropout_forward_stub(x.device())(x.contiguous(), y, mask, p, default_generator());
    }
    ctx->save_for_backward({mask});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor mask = ctx->get_saved_variables()[0];
    Tensor gx = empty(mask.shape(), TensorOptions(mask.dtype()).device(mask.device()));
    if (gx.numel() > 0) dropout_backward_stub(mask.device())(grads[0].contiguous(), mask, gx);
    return {gx, Tensor()};
  }
};

}  // namespace

void register_dropout_cpu_kernels() {
  dropout_forward_stub.set(DeviceType::CPU, dropout_forward_cpu);
  dropout_backward_stub.set(DeviceType::CPU, dropout_backward_cpu);
}

Tensor dropout(const Tensor& x, double p, bool training) {
  MINIDL_CHECK(p >= 0.0 && p <= 1.0, "dropout probability has to be between 0 and 1, but got ", p);
  MINIDL_CHECK(x.defined(), "dropout: expected a defined tensor");
  if (!training || p == 0.0) return x;
  MINIDL_CHECK(is_floating(x.dtype()), "dropout: expected a floating point tensor, got ", dtype_name(x.dtype()));
  return DropoutFunction::apply(x, p);
}

}  // namespace minidl
