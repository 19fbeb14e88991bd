// dice_loss and bce_dice_loss, composed from sigmoid, mul, sum, div and mean:
// autograd differentiates input and target through those ops, everything
// stays on the input's device, and no kernel of its own is needed (the sums
// are the cost; three reductions over the input's size).
//   d(1 - dice)/dp_i = -(2 t_i (P + T + s) - (2 I + s)) / (P + T + s)^2, times p (1 - p) for the logit.
#include "minidl/ops/dice_loss.h"

#include <numeric>

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

}  // namespace

Tensor dice_loss(const Tensor& input, const Tensor& target, double smooth, bool batch) {
  check_dice_args(input, target, smooth, "dice_loss");
  // Per sample: sum every dim but the first ((N) input: each element is a sample).
  const Tensor x = input.dim() == 1 ? input.unsqueeze(1) : input;
  const Tensor t = target.dim() == 1 ? target.unsqueeze(1) : target;
  Shape dims;  // empty: all dims (batch)
  if (!batch) {
    dims.resize(static_cast<size_t>(x.dim() - 1));
    std::iota(dims.begin(), dims.end(), int64_t{1});
  }
  const Tensor p = sigmoid(x);
  const Tensor intersection = sum(p * t, dims), cardinality = sum(p, dims) + sum(t, dims);
  const Tensor dice = (intersection * 2.0 + smooth) / (cardinality + smooth);
  return 1.0 - (batch ? dice : mean(dice));  // no samples: mean is nan
}

Tensor bce_dice_loss(const Tensor& input, const Tensor& target, double bce_weight, double dice_weight, double smooth,
                     bool batch) {
  check_dice_args(input, target, smooth, "bce_dice_loss");
  return binary_cross_entropy_with_logits(input, target) * bce_weight +
         dice_loss(input, target, smooth, batch) * dice_weight;
}

}  // namespace minidl
