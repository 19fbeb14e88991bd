// softmax and log_softmax along one dim.
//   softmax:      y_i = exp(x_i - m) / sum_j exp(x_j - m),  m = max_j x_j (for stability)
//   log_softmax:  y_i = x_i - m - log(sum_j exp(x_j - m))
//   backward (g = dL/dy, sums along the dim):
//     softmax:      dx = y * (g - sum(g * y))
//     log_softmax:  dx = g - exp(y) * sum(g)
// Forward saves only its output y. Backward returns a fresh gradient tensor
// (the engine accumulates it). CPU kernels: ops/cpu/softmax.cpp.
#include "minidl/ops/softmax.h"

#include <algorithm>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"

namespace minidl {

DispatchStub<SoftmaxForwardFn> softmax_forward_stub("softmax");
DispatchStub<SoftmaxBackwardFn> softmax_backward_stub("softmax_backward");

namespace {

// ---- autograd ------------------------------------------------------------------

struct SoftmaxFunction : autograd::Function<SoftmaxFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, int64_t dim, bool log) {
    Tensor xc = x.contiguous();
    Tensor y = empty(x.shape(), x.options());
    if (y.numel() > 0) softmax_forward_stub(x.device())(xc, y, dim, log);
    ctx->save_for_backward({y});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["log"] = log;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!ctx->needs_input_grad(0)) return {Tensor(), Tensor(), Tensor()};
    const Tensor y = ctx->get_saved_variables()[0];
    const Tensor gy = grads[0].contiguous();
    Tensor gx = empty(y.shape(), y.options());
    if (gx.numel() > 0)
      softmax_backward_stub(y.device())(gy, y, gx, ctx->saved_data["dim"].to_int(), ctx->saved_data["log"].to_bool());
    return {gx, Tensor(), Tensor()};
  }
};

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  MINIDL_CHECK(x.defined(), op, ": expected a defined tensor");
  MINIDL_CHECK(is_floating(x.dtype()), op, ": expected a floating point tensor, got ", dtype_name(x.dtype()));
  // A 0-d tensor behaves as one element along dim 0 (dims -1 and 0 are valid).
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  return SoftmaxFunction::apply(x, d, log);
}

}  // namespace


Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(amp::cast_args(amp::AmpOp::softmax, x)[0], dim, /*log=*/false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(amp::cast_args(amp::AmpOp::log_softmax, x)[0], dim, /*log=*/true);
}

}  // namespace minidl
