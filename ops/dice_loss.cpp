// dice_loss and bce_dice_loss. The forward is composed from sigmoid, mul, sum,
// div and mean, so everything stays on the input's device and no kernel of its
// own is needed (the sums are the cost; three reductions over the input's
// size). The backward is written out (DiceLoss below) rather than left to
// autograd through the composition: with D = P + T + s (per sample),
//   d(1 - dice)/dp_i = -(2 t_i D - (2 I + s)) / D^2 = a t_i + b,  a = -2/D, b = (2 I + s)/D^2
// (divided by N for the mean over samples), times p (1 - p) for the logit
// (sigmoid's backward kernel), and the same with p and t swapped for the
// target: two broadcast ops and one kernel, where the composition's backward
// took five full-size passes (two materialized sum gradients, a mul, an add
// and sigmoid's backward).
// Saved: p = sigmoid(input), the target, 2 I + s and D.
#include "minidl/ops/dice_loss.h"

#include <numeric>

#include "minidl/core/autograd/function.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/binary_cross_entropy.h"
#include "minidl/ops/reduce.h"
#include "minidl/ops/unary.h"

namespace minidl {

namespace {

void check_dice_args(const Tensor& input, const Tensor& target, double smooth, const char* op) {
  MINIDL_CHECK(input.defined() && target.defined(), op, ": expected defined input and target tensors");
  MINIDL_CHECK(input.dim() >= 1, op, ": expected an input of shape (N, ...), got a 0-d tensor");
  MINIDL_CHECK(input.shape() == target.shape(), op, ": expected a target of the input's shape ",
               shape_str(input.shape()), ", got ", shape_str(target.shape()));
  MINIDL_CHECK(is_floating(input.dtype()), op, ": expected a floating point input, got ", dtype_name(input.dtype()));
  MINIDL_CHECK(target.dtype() == input.dtype(), op, ": expected a target of the input's dtype ",
               dtype_name(input.dtype()), ", got ", dtype_name(target.dtype()));
  MINIDL_CHECK(input.device() == target.device(), op, ": expected input and target on the same device, got ",
               input.device(), " and ", target.device());
  MINIDL_CHECK(smooth >= 0.0, op, ": expected smooth >= 0, got ", smooth);
}

using autograd::AutogradContext;
using autograd::variable_list;

// x, t: (N, ...) with N samples (a 1-D input is unsqueezed by the caller).
struct DiceLoss : autograd::Function<DiceLoss> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& t, double smooth, bool batch) {
    Shape dims;  // empty: all dims (batch)
    if (!batch) {
      dims.resize(static_cast<size_t>(x.dim() - 1));
      std::iota(dims.begin(), dims.end(), int64_t{1});
    }
    const Tensor p = sigmoid(x);
    const Tensor numer = sum(p * t, dims) * 2.0 + smooth, denom = sum(p, dims) + sum(t, dims) + smooth;
    const Tensor dice = numer / denom;
    ctx->save_for_backward({p, t, numer, denom});
    ctx->saved_data["batch"] = batch;
    return 1.0 - (batch ? dice : mean(dice));  // no samples: mean is nan
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &p = saved[0], &t = saved[1], &numer = saved[2], &denom = saved[3];
    const bool batch = ctx->saved_data["batch"].to_bool();
    // w = dL/d(dice) per sample, dL/dp_i = w (2 t_i / D - (2 I + s) / D^2); a and b shaped (N, 1, ..., 1) (or 0-d) to broadcast over the sample.
    const Tensor w = batch ? -grads[0] : grads[0] * (-1.0 / static_cast<double>(numer.numel()));
    Shape per_sample(static_cast<size_t>(p.dim()), 1);
    if (!batch) per_sample[0] = p.size(0);
    const Tensor a = (w * 2.0 / denom).reshape(batch ? Shape{} : per_sample);
    const Tensor b = (-w * numer / (denom * denom)).reshape(batch ? Shape{} : per_sample);
    Tensor dx, dt;
    if (ctx->needs_input_grad(0)) {
      const Tensor dp = t * a + b;
      dx = empty(p.shape(), p.options());
      unary_backward_stub(p.device())(UnaryOp::Sigmoid, UnaryParams{}, dx, dp, p);
    }
    if (ctx->needs_input_grad(1)) dt = p * a + b;
    return {dx, dt, Tensor(), Tensor()};
  }
};

}  // namespace

Tensor dice_loss(const Tensor& input, const Tensor& target, double smooth, bool batch) {
  check_dice_args(input, target, smooth, "dice_loss");
  // Per sample: sum every dim but the first ((N) input: each element is a sample).
  const Tensor x = input.dim() == 1 ? input.unsqueeze(1) : input;
  const Tensor t = target.dim() == 1 ? target.unsqueeze(1) : target;
  return DiceLoss::apply(x, t, smooth, batch);
}

Tensor bce_dice_loss(const Tensor& input, const Tensor& target, double bce_weight, double dice_weight, double smooth,
                     bool batch) {
  check_dice_args(input, target, smooth, "bce_dice_loss");
  return binary_cross_entropy_with_logits(input, target) * bce_weight +
         dice_loss(input, target, smooth, batch) * dice_weight;
}

}  // namespace minidl
