// Losses: cross_entropy (fused log_softmax + nll, with class weights and label
// smoothing; or probability targets), nll_loss and mse_loss, with PyTorch's
// reductions.
//
// The class losses view input as (N, C, S) (S = d1*...*dk, 1 for (N, C) input;
// a 1-D input (C) is N = 1 with a 0-d target) and have one "position" per (n, s).
// With class weights w (all 1 when not given) and t the position's target:
//   cross_entropy: lse = log sum_c exp(x_c)  (max subtracted),  logp_c = x_c - lse
//     loss = (1 - eps) * w_t * (-logp_t) + eps / C * sum_c w_c * (-logp_c)   (PyTorch's formula)
//     dloss/dx_c = p_c * ((1 - eps) * w_t + eps / C * sum_k w_k) - eps / C * w_c - (1 - eps) * w_t [c == t]
//     with p_c = softmax_c. Forward saves the input, the target, the weights,
//     lse per position (not the C-times larger log-probabilities) and the total
//     weight below; backward recomputes softmax_c = exp(x_c - lse).
//   nll_loss: loss = -w_t x_t;  dloss/dx_c = -w_t [c == t]. Saves target, weights and total weight.
// Positions whose target == ignore_index contribute 0 and get zero gradient;
// "mean" divides by the total weight: sum of w_t over the other positions
// (their count without weights; 0 of them gives nan, as PyTorch). The forward
// kernel sums it into a float64 0-d tensor on the input's device
// (ReductionInfo::total_weight), so targets are not copied to the host; their
// range (class index or ignore_index) is checked for CPU targets only.
// Per-position losses are summed in float64 in a fixed order.
//   cross_entropy with probability targets q (input's shape):
//     q' = (1 - eps) q + eps / C,  loss = -sum_c w_c q'_c logp_c,  "mean" divides by N * S;
//     fused kernels where the device has them (ops/cross_entropy_probs.h: saves
//     input, target, weights and lse; dx and dq), else composed from
//     log_softmax, mul and sum (autograd gives dx and dq).
//   mse_loss: loss_i = (x_i - y_i)^2, dx = 2 (x - y) g = -dy. Saves input and target.
// Backward returns fresh gradient tensors (the engine accumulates them).
// CPU kernels: ops/cpu/loss.cpp.
#include "minidl/ops/loss.h"

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/cross_entropy_probs.h"
#include "minidl/ops/reduce.h"
#include "minidl/ops/softmax.h"

namespace minidl {

DispatchStub<CrossEntropyForwardFn> cross_entropy_forward_stub("cross_entropy");
DispatchStub<CrossEntropyBackwardFn> cross_entropy_backward_stub("cross_entropy_backward");
DispatchStub<NllLossForwardFn> nll_loss_forward_stub("nll_loss");
DispatchStub<NllLossBackwardFn> nll_loss_backward_stub("nll_loss_backward");
DispatchStub<MseLossForwardFn> mse_loss_forward_stub("mse_loss");
DispatchStub<MseLossBackwardFn> mse_loss_backward_stub("mse_loss_backward");
DispatchStub<CrossEntropyProbsForwardFn> cross_entropy_probs_forward_stub("cross_entropy_probs");
DispatchStub<CrossEntropyProbsBackwardFn> cross_entropy_probs_backward_stub("cross_entropy_probs_backward");

namespace {

// ---- autograd -------------------------------------------------------------------------------

Shape reduced_shape(const Tensor& target, Reduction reduction) {
  return reduction == Reduction::None ? target.shape() : Shape{};
}

// The forward kernel writes the total weight of the non-ignored targets here.
ReductionInfo new_reduction(Reduction reduction, const Tensor& input, const Tensor& weight) {
  return {reduction, weight, empty({}, TensorOptions(kFloat64).device(input.device()))};
}

// The weight and total weight are saved with the tensors, the rest here.
void save_reduction(AutogradContext* ctx, const ClassGeometry& g, int64_t ignore_index, Reduction reduction) {
  ctx->saved_data["geometry"] = g.to_list();
  ctx->saved_data["ignore_index"] = ignore_index;
  ctx->saved_data["reduction"] = static_cast<int64_t>(reduction);
}

ReductionInfo saved_reduction(AutogradContext* ctx, const Tensor& weight, const Tensor& total_weight) {
  return {static_cast<Reduction>(ctx->saved_data["reduction"].to_int()), weight, total_weight};
}

struct CrossEntropyFunction : autograd::Function<CrossEntropyFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& target, const Tensor& weight,
                        const ClassGeometry& g, int64_t ignore_index, double eps, Reduction reduction) {
    const TensorOptions options = input.options();
    Tensor x = input.contiguous();
    Tensor lse = empty({g.positions()}, options);
    Tensor out = empty(reduced_shape(target, reduction), options);
    const ReductionInfo r = new_reduction(reduction, x, weight);
    cross_entropy_forward_stub(x.device())(x, target, lse, out, g, ignore_index, eps, r);
    ctx->save_for_backward({x, target, lse, r.weight, r.total_weight});
    save_reduction(ctx, g, ignore_index, reduction);
    ctx->saved_data["label_smoothing"] = eps;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &target = saved[1], &lse = saved[2];
    Tensor gx = empty(x.shape(), x.options());
    cross_entropy_backward_stub(x.device())(
        grads[0].contiguous(), x, target, lse, gx, ClassGeometry::from_list(ctx->saved_data["geometry"].to_int_list()),
        ctx->saved_data["ignore_index"].to_int(), ctx->saved_data["label_smoothing"].to_double(),
        saved_reduction(ctx, saved[3], saved[4]));
    return {gx, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

struct CrossEntropyProbsFunction : autograd::Function<CrossEntropyProbsFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& target, const Tensor& weight,
                        const ClassGeometry& g, double eps, Reduction reduction) {
    Tensor x = input.contiguous(), q = target.contiguous();
    Shape out_shape;  // None: the input's shape without the class dim
    if (reduction == Reduction::None) {
      out_shape = x.shape();
      out_shape.erase(out_shape.begin() + (x.dim() == 1 ? 0 : 1));
    }
    Tensor lse = empty({g.positions()}, x.options());
    Tensor out = empty(out_shape, x.options());
    const ReductionInfo r = new_reduction(reduction, x, weight);
    cross_entropy_probs_forward_stub(x.device())(x, q, lse, out, g, eps, r);
    ctx->save_for_backward({x, q, lse, r.weight, r.total_weight});
    ctx->saved_data["geometry"] = g.to_list();
    ctx->saved_data["reduction"] = static_cast<int64_t>(reduction);
    ctx->saved_data["label_smoothing"] = eps;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &q = saved[1], &lse = saved[2];
    Tensor gx = empty(x.shape(), x.options());
    Tensor gq = ctx->needs_input_grad(1) ? empty(q.shape(), q.options()) : Tensor();
    cross_entropy_probs_backward_stub(x.device())(
        grads[0].contiguous(), x, q, lse, gx, gq, ClassGeometry::from_list(ctx->saved_data["geometry"].to_int_list()),
        ctx->saved_data["label_smoothing"].to_double(), saved_reduction(ctx, saved[3], saved[4]));
    return {ctx->needs_input_grad(0) ? gx : Tensor(), gq, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

struct NllLossFunction : autograd::Function<NllLossFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& target, const Tensor& weight,
                        const ClassGeometry& g, int64_t ignore_index, Reduction reduction) {
    Tensor out = empty(reduced_shape(target, reduction), input.options());
    const ReductionInfo r = new_reduction(reduction, input, weight);
    nll_loss_forward_stub(input.device())(input.contiguous(), target, out, g, ignore_index, r);
    ctx->save_for_backward({target, r.weight, r.total_weight});
    save_reduction(ctx, g, ignore_index, reduction);
    ctx->saved_data["input_shape"] = input.shape();
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& target = saved[0];
    const Tensor gy = grads[0].contiguous();
    Tensor gx = empty(ctx->saved_data["input_shape"].to_int_list(), gy.options());
    nll_loss_backward_stub(gy.device())(gy, target, gx,
                                        ClassGeometry::from_list(ctx->saved_data["geometry"].to_int_list()),
                                        ctx->saved_data["ignore_index"].to_int(), saved_reduction(ctx, saved[1], saved[2]));
    return {gx, Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

struct MseLossFunction : autograd::Function<MseLossFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& target, Reduction reduction) {
    Tensor x = input.contiguous(), y = target.contiguous();
    Tensor out = empty(reduction == Reduction::None ? x.shape() : Shape{}, x.options());
    mse_loss_forward_stub(x.device())(x, y, out, reduction);
    ctx->save_for_backward({x, y});
    ctx->saved_data["reduction"] = static_cast<int64_t>(reduction);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &y = saved[1];
    const TensorOptions options = x.options();
    Tensor gx = ctx->needs_input_grad(0) ? empty(x.shape(), options) : Tensor();
    Tensor gy = ctx->needs_input_grad(1) ? empty(y.shape(), options) : Tensor();
    mse_loss_backward_stub(x.device())(grads[0].contiguous(), x, y, gx, gy,
                                       static_cast<Reduction>(ctx->saved_data["reduction"].to_int()));
    return {gx, gy, Tensor()};
  }
};

// ---- argument checks ---------------------------------------------------------------------------

// Checks the (input, target) pair of a class loss; returns its (N, C, S) view.
ClassGeometry class_geometry(const Tensor& input, const Tensor& target, const char* op) {
  MINIDL_CHECK(input.defined() && target.defined(), op, ": expected defined input and target tensors");
  MINIDL_CHECK(input.dim() >= 1, op, ": Expected 1 or more dimensions (got 0)");
  MINIDL_CHECK(is_floating(input.dtype()), op, ": expected a floating point input, got ", dtype_name(input.dtype()));
  MINIDL_CHECK(target.dtype() == kInt64 || target.dtype() == kUInt8, op,
               ": expected target dtype to be Long or Byte (int64 or uint8 class indices), but got ",
               dtype_name(target.dtype()));
  // PyTorch's nll_loss2d (input of 3 or more dims) takes Long only.
  MINIDL_CHECK(target.dtype() == kInt64 || input.dim() <= 2, op, ": expected scalar type Long but found Byte (uint8 "
               "targets are taken for 1-D or 2-D input only, as PyTorch; got input of dimension ", input.dim(), ")");
  MINIDL_CHECK(input.device() == target.device(), op, ": expected input and target on the same device, got ",
               input.device(), " and ", target.device());
  if (input.dim() == 1) {
    MINIDL_CHECK(target.dim() == 0, op, ": For 1D input, expected a 0D target (one class index), but got target size: ",
                 shape_str(target.shape()));
    return {1, input.size(0), 1};
  }
  if (target.dim() >= 1)
    MINIDL_CHECK(input.size(0) == target.size(0), op, ": Expected input batch_size (", input.size(0),
                 ") to match target batch_size (", target.size(0), ").");
  MINIDL_CHECK(!(input.dim() == 2 && target.dim() > 1), op,
               ": 0D or 1D target tensor expected, multi-target not supported");
  Shape expected{input.size(0)};
  for (int64_t d = 2; d < input.dim(); ++d) expected.push_back(input.size(d));
  MINIDL_CHECK(target.shape() == expected, op, ": Expected target size ", shape_str(expected), ", got ",
               shape_str(target.shape()));
  ClassGeometry g;
  g.N = input.size(0);
  g.C = input.size(1);
  for (int64_t d = 2; d < input.dim(); ++d) g.S *= input.size(d);
  return g;
}

// The targets as the kernels read them: contiguous int64 (uint8 class indices widened).
Tensor class_indices(const Tensor& target) {
  return (target.dtype() == kUInt8 ? target.to(kInt64) : target).contiguous();
}

// Every target is a class index or ignore_index. Checked for CPU targets
// only, in place (contiguous): elsewhere reading them is a host round trip
// (a CUDA kernel asserts on the device instead, as PyTorch's).
void check_targets(const Tensor& target, int64_t num_classes, int64_t ignore_index, const char* op) {
  if (!target.device().is_cpu()) return;
  const int64_t* t = target.data_ptr<int64_t>();
  const int64_t n = target.numel();  // not in the loop: numel() walks the shape
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = t[i];
    if (v == ignore_index) continue;
    MINIDL_CHECK(v >= 0 && v < num_classes, op, ": Target ", v, " is out of bounds. (expected a class index in [0, ",
                 num_classes, ") or ignore_index ", ignore_index, ")");
  }
}


// The class weights as the kernels take them: undefined, or C contiguous
// values of the input's dtype on its device. They get no gradient.
Tensor checked_weight(const Tensor& weight, const Tensor& input, int64_t num_classes, const char* op) {
  if (!weight.defined()) return Tensor();
  MINIDL_CHECK(weight.dim() == 1 && weight.numel() == num_classes, op,
               ": weight tensor should be defined either for all ", num_classes,
               " classes or no classes but got weight tensor of shape: ", shape_str(weight.shape()));
  MINIDL_CHECK(weight.dtype() == input.dtype(), op, ": expected scalar type ", dtype_name(input.dtype()),
               " but found ", dtype_name(weight.dtype()), " (weight)");
  MINIDL_CHECK(weight.device() == input.device(), op, ": expected input and weight on the same device, got ",
               input.device(), " and ", weight.device());
  return weight.detach().contiguous();
}

// cross_entropy with class probabilities (soft labels) of the input's shape,
// composed from existing ops: autograd differentiates input and target.
Tensor cross_entropy_probabilities(const Tensor& input, const Tensor& target, const Tensor& weight,
                                   Reduction reduction, int64_t ignore_index, double eps) {
  const char* op = "cross_entropy";
  MINIDL_CHECK(is_floating(input.dtype()), op, ": expected a floating point input, got ", dtype_name(input.dtype()));
  MINIDL_CHECK(is_floating(target.dtype()), op, ": Expected floating point type for target with class "
               "probabilities, got ", dtype_name(target.dtype()));
  MINIDL_CHECK(ignore_index < 0, op, ": ignore_index is not supported for floating point target");
  MINIDL_CHECK(target.dtype() == input.dtype(), op, ": expected input and target of the same dtype, got ",
               dtype_name(input.dtype()), " and ", dtype_name(target.dtype()));
  MINIDL_CHECK(input.device() == target.device(), op, ": expected input and target on the same device, got ",
               input.device(), " and ", target.device());
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t C = input.size(class_dim);
  const Tensor w = checked_weight(weight, input, C, op);
  ensure_kernels_registered();
  if (cross_entropy_probs_forward_stub.has_kernel(input.device().type)) {
    ClassGeometry g{input.dim() == 1 ? 1 : input.size(0), C, 1};
    for (int64_t d = 2; d < input.dim(); ++d) g.S *= input.size(d);
    return CrossEntropyProbsFunction::apply(input, target, w, g, eps, reduction);
  }
  const Tensor q = eps > 0.0 ? target * (1.0 - eps) + eps / static_cast<double>(C) : target;
  Tensor prod = log_softmax(input, class_dim) * q;
  if (w.defined()) {
    Shape per_class(static_cast<size_t>(input.dim()), 1);
    per_class[class_dim] = C;
    prod = prod * w.reshape(per_class);
  }
  if (reduction == Reduction::None) return -sum(prod, {class_dim});
  if (reduction == Reduction::Sum) return -sum(prod);
  const int64_t positions = C > 0 ? input.numel() / C : 0;
  return sum(prod) / -static_cast<double>(positions);  // 0 positions: 0/0 = nan, as PyTorch
}

}  // namespace


Tensor cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  return cross_entropy(input, target, Tensor(), reduction, ignore_index, label_smoothing);
}

Tensor cross_entropy(const Tensor& input_in, const Tensor& target_in, const Tensor& weight_in, Reduction reduction,
                     int64_t ignore_index, double label_smoothing) {
  const auto cast = amp::cast_args(amp::AmpOp::cross_entropy, input_in, target_in, weight_in);
  const Tensor &input = cast[0], &target = cast[1], &weight = cast[2];
  MINIDL_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
               "cross_entropy: label_smoothing must be between 0.0 and 1.0. Got: ", label_smoothing);
  // PyTorch's rule: a target of the input's shape holds class probabilities.
  if (input.defined() && target.defined() && input.dim() >= 1 && input.shape() == target.shape())
    return cross_entropy_probabilities(input, target, weight, reduction, ignore_index, label_smoothing);
  const ClassGeometry g = class_geometry(input, target, "cross_entropy");
  const Tensor w = checked_weight(weight, input, g.C, "cross_entropy");
  Tensor t = class_indices(target);
  check_targets(t, g.C, ignore_index, "cross_entropy");
  return CrossEntropyFunction::apply(input, t, w, g, ignore_index, label_smoothing, reduction);
}

Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  return nll_loss(input, target, Tensor(), reduction, ignore_index);
}

Tensor nll_loss(const Tensor& input_in, const Tensor& target_in, const Tensor& weight_in, Reduction reduction,
                int64_t ignore_index) {
  const auto cast = amp::cast_args(amp::AmpOp::nll_loss, input_in, target_in, weight_in);
  const Tensor &input = cast[0], &target = cast[1], &weight = cast[2];
  const ClassGeometry g = class_geometry(input, target, "nll_loss");
  const Tensor w = checked_weight(weight, input, g.C, "nll_loss");
  Tensor t = class_indices(target);
  check_targets(t, g.C, ignore_index, "nll_loss");
  return NllLossFunction::apply(input, t, w, g, ignore_index, reduction);
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const auto cast = amp::cast_args(amp::AmpOp::mse_loss, input_in, target_in);
  const Tensor &input = cast[0], &target = cast[1];
  MINIDL_CHECK(input.defined() && target.defined(), "mse_loss: expected defined input and target tensors");
  // Stricter than PyTorch, which broadcasts them with a warning that it is probably a bug.
  MINIDL_CHECK(input.shape() == target.shape(), "mse_loss: expected input and target of the same shape (they are "
               "not broadcast), got input ", shape_str(input.shape()), " and target ", shape_str(target.shape()));
  MINIDL_CHECK(input.dtype() == target.dtype(), "mse_loss: expected input and target of the same dtype, got ",
               dtype_name(input.dtype()), " and ", dtype_name(target.dtype()));
  MINIDL_CHECK(is_floating(input.dtype()), "mse_loss: expected a floating point input, got ",
               dtype_name(input.dtype()));
  MINIDL_CHECK(input.device() == target.device(), "mse_loss: expected input and target on the same device, got ",
               input.device(), " and ", target.device());
  return MseLossFunction::apply(input, target, reduction);
}

}  // namespace minidl
