// binary_cross_entropy and binary_cross_entropy_with_logits (PyTorch's math):
//   probabilities: l_i = -(t log x + (1 - t) log(1 - x)), each log clamped to >= -100
//     dl/dx = (x - t) / max(x (1 - x), 1e-12),   dl/dt = log(1 - x) - log x
//   logits, with l = 1 + (pos_weight - 1) t and log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)):
//     l_i = (1 - t) x - l log_sigmoid(x)          (never exp of a large positive number)
//     dl/dx = l sigmoid(x) - pos_weight t,         dl/dt = log_sigmoid(-x) - pos_weight log_sigmoid(x)
// An elementwise autograd function computes l_i (forward saves x, t and the
// expanded pos_weight); weight and the reduction are composed after it from
// mul, sum and mean, so "mean" divides by numel on the device and the
// reductions' backward comes from those ops. Backward returns fresh gradients
// for input and target (the engine accumulates them); weight and pos_weight
// are not differentiable, as PyTorch. CPU kernels: ops/cpu/binary_cross_entropy.cpp.
#include "minidl/ops/binary_cross_entropy.h"

#include <string>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/core/autograd/grad_mode.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/reduce.h"

namespace minidl {

DispatchStub<BceForwardFn> bce_forward_stub("binary_cross_entropy");
DispatchStub<BceBackwardFn> bce_backward_stub("binary_cross_entropy_backward");
DispatchStub<BceLogitsForwardFn> bce_logits_forward_stub("binary_cross_entropy_with_logits");
DispatchStub<BceLogitsBackwardFn> bce_logits_backward_stub("binary_cross_entropy_with_logits_backward");

namespace {

Tensor empty_if(bool needed, const Tensor& like) { return needed ? empty(like.shape(), like.options()) : Tensor(); }

struct BinaryCrossEntropy : autograd::Function<BinaryCrossEntropy> {
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& target) {
    Tensor x = input.contiguous(), t = target.contiguous();
    Tensor out = empty(x.shape(), x.options());
    bce_forward_stub(x.device())(x, t, out);
    ctx->save_for_backward({x, t});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &t = saved[1];
    Tensor gx = empty_if(ctx->needs_input_grad(0), x), gt = empty_if(ctx->needs_input_grad(1), x);
    bce_backward_stub(x.device())(grads[0].contiguous(), x, t, gx, gt);
    return {gx, gt};
  }
};

struct BinaryCrossEntropyWithLogits : autograd::Function<BinaryCrossEntropyWithLogits> {
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& target, const Tensor& pos_weight) {
    Tensor x = input.contiguous(), t = target.contiguous();
    Tensor pw = pos_weight.defined() ? pos_weight.expand(x.shape()).contiguous() : Tensor();
    Tensor out = empty(x.shape(), x.options());
    bce_logits_forward_stub(x.device())(x, t, pw, out);
    ctx->save_for_backward({x, t, pw});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &t = saved[1], &pw = saved[2];
    Tensor gx = empty_if(ctx->needs_input_grad(0), x), gt = empty_if(ctx->needs_input_grad(1), x);
    bce_logits_backward_stub(x.device())(grads[0].contiguous(), x, t, pw, gx, gt);
    return {gx, gt, Tensor()};
  }
};

// ---- argument checks ---------------------------------------------------------------------------

void check_pair(const Tensor& input, const Tensor& target, const char* op) {
  MINIDL_CHECK(input.defined() && target.defined(), op, ": expected defined input and target tensors");
  MINIDL_CHECK(is_floating(input.dtype()), op, ": expected a floating point input, got ", dtype_name(input.dtype()));
  MINIDL_CHECK(target.dtype() == input.dtype(), op, ": Found dtype ", dtype_name(target.dtype()), " but expected ",
               dtype_name(input.dtype()), " (target must have the input's dtype)");
  MINIDL_CHECK(input.device() == target.device(), op, ": expected input and target on the same device, got ",
               input.device(), " and ", target.device());
}

// weight / pos_weight: the input's dtype and device, broadcastable to the
// input's shape without growing it, and no requires_grad (PyTorch refuses it too).
void check_weight(const Tensor& w, const Tensor& input, const char* op, const char* name) {
  if (!w.defined()) return;
  MINIDL_CHECK(w.dtype() == input.dtype(), op, ": expected ", name, " of dtype ", dtype_name(input.dtype()),
               ", got ", dtype_name(w.dtype()));
  MINIDL_CHECK(w.device() == input.device(), op, ": expected input and ", name, " on the same device, got ",
               input.device(), " and ", w.device());
  const int64_t nd = input.dim(), wd = w.dim();
  bool ok = wd <= nd;
  for (int64_t k = 1; ok && k <= wd; ++k) {
    const int64_t a = w.size(wd - k), b = input.size(nd - k);
    MINIDL_CHECK(a == b || a == 1, op, ": The size of tensor a (", a, ") must match the size of tensor b (", b,
                 ") at non-singleton dimension ", nd - k, " (", name, " of shape ", shape_str(w.shape()),
                 " must broadcast to the input's shape ", shape_str(input.shape()), ")");
  }
  MINIDL_CHECK(ok, op, ": ", name, " of shape ", shape_str(w.shape()), " must broadcast to the input's shape ",
               shape_str(input.shape()), " (it has more dimensions)");
  MINIDL_CHECK(!(w.requires_grad() && autograd::GradMode::is_enabled()), "The function '", op,
               "' is not differentiable with respect to argument '", name,
               "'. This input cannot have requires_grad True.");
}

Tensor reduce(const Tensor& loss, const Tensor& weight, Reduction reduction) {
  const Tensor l = weight.defined() ? loss * weight : loss;
  if (reduction == Reduction::None) return l;
  return reduction == Reduction::Sum ? sum(l) : mean(l);  // mean of nothing: nan, as PyTorch
}

}  // namespace

Tensor binary_cross_entropy(const Tensor& input_in, const Tensor& target_in, const Tensor& weight_in,
                            Reduction reduction) {
  const auto cast = amp::cast_args(amp::AmpOp::binary_cross_entropy, input_in, target_in, weight_in);
  const Tensor &input = cast[0], &target = cast[1], &weight = cast[2];
  const char* op = "binary_cross_entropy";
  MINIDL_CHECK(input.defined() && target.defined(), op, ": expected defined input and target tensors");
  MINIDL_CHECK(input.shape() == target.shape(), op, ": Using a target size (", shape_str(target.shape()),
               ") that is different to the input size (", shape_str(input.shape()),
               ") is deprecated. Please ensure they have the same size.");
  check_pair(input, target, op);
  check_weight(weight, input, op, "weight");
  return reduce(BinaryCrossEntropy::apply(input, target), weight, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in, const Tensor& weight_in,
                                        Reduction reduction, const Tensor& pos_weight_in) {
  const auto cast = amp::cast_args(amp::AmpOp::binary_cross_entropy_with_logits, input_in, target_in, weight_in, pos_weight_in);
  const Tensor &input = cast[0], &target = cast[1], &weight = cast[2], &pos_weight = cast[3];
  const char* op = "binary_cross_entropy_with_logits";
  MINIDL_CHECK(input.defined() && target.defined(), op, ": expected defined input and target tensors");
  MINIDL_CHECK(input.shape() == target.shape(), op, ": Target size (", shape_str(target.shape()),
               ") must be the same as input size (", shape_str(input.shape()), ")");
  check_pair(input, target, op);
  check_weight(weight, input, op, "weight");
  check_weight(pos_weight, input, op, "pos_weight");
  return reduce(BinaryCrossEntropyWithLogits::apply(input, target, pos_weight), weight, reduction);
}

}  // namespace minidl
