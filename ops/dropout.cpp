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
// CPU kernels: ops/cpu/dropout.cpp.
#include "minidl/ops/dropout.h"

#include "minidl/core/autograd/function.h"
#include "minidl/core/cuda_graph.h"
#include "minidl/core/generator.h"

namespace minidl {

DispatchStub<DropoutForwardFn> dropout_forward_stub("dropout");
DispatchStub<DropoutBackwardFn> dropout_backward_stub("dropout_backward");

namespace {

struct DropoutFunction : autograd::Function<DropoutFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double p) {
    const TensorOptions options = x.options();
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
    Tensor gx = empty(mask.shape(), mask.options());
    if (gx.numel() > 0) dropout_backward_stub(mask.device())(grads[0].contiguous(), mask, gx);
    return {gx, Tensor()};
  }
};

}  // namespace


Tensor dropout(const Tensor& x, double p, bool training) {
  MINIDL_CHECK(p >= 0.0 && p <= 1.0, "dropout probability has to be between 0 and 1, but got ", p);
  MINIDL_CHECK(x.defined(), "dropout: expected a defined tensor");
  if (!training || p == 0.0) return x;
  MINIDL_CHECK(is_floating(x.dtype()), "dropout: expected a floating point tensor, got ", dtype_name(x.dtype()));
  // The seed is drawn on the host at each call and baked into the kernel's
  // arguments: a CUDA graph would replay the capture's mask forever.
  MINIDL_CHECK(!x.is_cuda() || !cuda::is_current_stream_capturing(),
               "dropout cannot be captured in a CUDA graph: its seed is drawn on the host at each call, so every "
               "replay would repeat the capture's mask (graph-safe Philox offsets are not implemented)");
  return DropoutFunction::apply(x, p);
}

}  // namespace minidl
