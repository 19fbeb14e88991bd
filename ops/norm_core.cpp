// The shared normalization core: statistics, normalize, backward (see
// norm_core.h for the (A, G, K, S) view every norm maps to).
//
// Forward, per group g over its M = A*K*S values (biased variance):
//   mean = sum x / M,  var = sum (x - mean)^2 / M,  invstd = 1 / sqrt(var + eps)
//   y = (x - mean) * invstd * w_c + b_c
// Backward, per group (sums over the group, w_c = 1 without weight):
//   sum_dy = sum w_c dy,  sum_dy_xmu = sum w_c dy (x - mean)
//   dx = (w_c dy - sum_dy / M - (x - mean) invstd^2 sum_dy_xmu / M) * invstd
//   dweight_c = sum dy (x - mean) invstd,  dbias_c = sum dy  (over every group using c)
// Running statistics (BatchNorm, InstanceNorm), on their device:
//   running = (1 - momentum) running + momentum batch   (variance unbiased)
// Sums are in double. Forward saves nothing itself (the op files save x,
// weight and the float64 mean/invstd through autograd_forward). The kernels
// write their outputs (never accumulate); the engine accumulates into .grad.
// CPU kernels: ops/cpu/norm_core.cpp.
#include "minidl/ops/norm_core.h"

#include <vector>

#include "minidl/core/autograd/grad_mode.h"

namespace minidl::norm {

DispatchStub<NormForwardFn> norm_forward_stub("normalization forward");
DispatchStub<NormBackwardFn> norm_backward_stub("normalization backward");
DispatchStub<NormUpdateRunningStatsFn> norm_update_running_stats_stub("update running statistics");
DispatchStub<NormStatsFromRunningFn> norm_stats_from_running_stub("statistics from running statistics");

namespace {

Tensor contiguous_or_undefined(const Tensor& t) { return t.defined() ? t.contiguous() : t; }

}  // namespace

Tensor forward(const Tensor& x, const NormGeometry& geo, const Tensor& weight, const Tensor& bias,
               double eps, bool use_input_stats, GroupStats& stats) {
  MINIDL_ASSERT(x.is_contiguous() && x.numel() == geo.numel());
  NormForwardArgs args;
  args.input = x;
  args.output = empty(x.shape(), x.options());
  args.weight = contiguous_or_undefined(weight);
  args.bias = contiguous_or_undefined(bias);
  args.geo = geo;
  args.eps = eps;
  args.use_input_stats = use_input_stats;
  if (use_input_stats) {
    stats.mean = empty({geo.G}, TensorOptions(kFloat64).device(x.device()));  // the stats live with x
    stats.var = empty({geo.G}, TensorOptions(kFloat64).device(x.device()));
    stats.invstd = empty({geo.G}, TensorOptions(kFloat64).device(x.device()));
    args.var = stats.var;
  } else {
    MINIDL_ASSERT(stats.mean.defined() && stats.invstd.defined() && stats.mean.numel() == geo.G &&
                  stats.mean.is_contiguous() && stats.invstd.is_contiguous());
  }
  args.mean = stats.mean;
  args.invstd = stats.invstd;
  norm_forward_stub(x.device())(args);
  return args.output;
}

GroupStats moments(const Tensor& x, const NormGeometry& geo, double eps) {
  MINIDL_ASSERT(x.is_contiguous() && x.numel() == geo.numel());
  const TensorOptions f64 = TensorOptions(kFloat64).device(x.device());  // the stats live with x
  GroupStats stats{empty({geo.G}, f64), empty({geo.G}, f64), empty({geo.G}, f64)};
  NormForwardArgs args;
  args.input = x;
  args.geo = geo;
  args.eps = eps;
  args.mean = stats.mean;
  args.var = stats.var;
  args.invstd = stats.invstd;
  norm_forward_stub(x.device())(args);
  return stats;
}

Grads backward(const Tensor& grad_out, const Tensor& x, const NormGeometry& geo,
               const Tensor& weight, const Tensor& mean, const Tensor& invstd, bool batch_stats,
               bool need_input, bool need_weight, bool need_bias, std::optional<DType> bias_dtype) {
  Grads grads;
  if (!need_input && !need_weight && !need_bias) return grads;
  const TensorOptions opts = x.options();
  NormBackwardArgs args;
  args.grad_out = grad_out.contiguous();
  args.input = x.contiguous();
  args.weight = contiguous_or_undefined(weight);
  args.geo = geo;
  args.mean = mean;
  args.invstd = invstd;
  args.batch_stats = batch_stats;
  if (need_input) args.grad_input = grads.input = empty(x.shape(), opts);
  // Parameter gradients in the parameters' dtype (float32 next to a bfloat16
  // input); without a weight, the bias's own dtype (the kernels read it there).
  const TensorOptions param_opts = weight.defined() ? weight.options() : opts;
  if (need_weight) args.grad_weight = grads.weight = empty({geo.channels()}, param_opts);
  if (need_bias)
    args.grad_bias = grads.bias =
        empty({geo.channels()}, weight.defined() ? param_opts : opts.dtype(bias_dtype.value_or(x.dtype())));
  norm_backward_stub(x.device())(args);
  return grads;
}

Tensor autograd_forward(AutogradContext* ctx, const Tensor& input, const Tensor& weight,
                        const Tensor& bias, const NormGeometry& geo, double eps,
                        bool use_input_stats, GroupStats& stats) {
  const Tensor x = input.contiguous();
  Tensor y = forward(x, geo, weight, bias, eps, use_input_stats, stats);
  ctx->save_for_backward({x, weight, stats.mean, stats.invstd});
  ctx->saved_data["geometry"] = to_list(geo);
  ctx->saved_data["batch_stats"] = use_input_stats;
  if (weight.defined()) ctx->saved_data["weight_shape"] = weight.shape();
  if (bias.defined()) {
    ctx->saved_data["bias_shape"] = bias.shape();
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.dtype());
  }
  return y;
}

variable_list autograd_backward(AutogradContext* ctx, const variable_list& grads) {
  const variable_list saved = ctx->get_saved_variables();
  Grads g = backward(grads[0], saved[0], from_list(ctx->saved_data["geometry"].to_int_list()),
                     saved[1], saved[2], saved[3], ctx->saved_data["batch_stats"].to_bool(),
                     ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2),
                     ctx->needs_input_grad(2) ? std::optional(static_cast<DType>(ctx->saved_data["bias_dtype"].to_int()))
                                              : std::nullopt);
  if (g.weight.defined()) g.weight = g.weight.view(ctx->saved_data["weight_shape"].to_int_list());
  if (g.bias.defined()) g.bias = g.bias.view(ctx->saved_data["bias_shape"].to_int_list());
  return {g.input, g.weight, g.bias, Tensor(), Tensor(), Tensor(), Tensor()};
}

void update_running_stats(const Tensor& running_mean, const Tensor& running_var, const Tensor& batch_mean,
                          const Tensor& batch_var, int64_t rows, int64_t count, double momentum) {
  MINIDL_ASSERT(count > 1 && batch_mean.dtype() == kFloat64 && batch_var.dtype() == kFloat64);
  NoGradGuard no_grad;
  NormRunningStatsArgs args;
  // The kernel writes contiguous (C) arrays; a strided buffer is updated
  // through a contiguous copy (on its device) and copied back.
  args.running_mean = running_mean.contiguous();
  args.running_var = running_var.contiguous();
  args.batch_mean = batch_mean.contiguous();
  args.batch_var = batch_var.contiguous();
  args.rows = rows;
  args.var_correction = static_cast<double>(count) / static_cast<double>(count - 1);
  args.momentum = momentum;
  norm_update_running_stats_stub(running_mean.device())(args);
  auto write_back = [](const Tensor& running, const Tensor& updated) {
    if (running.is_same(updated)) running.bump_version();  // updated in place
    else Tensor(running).copy_(updated);                    // bumps the version
  };
  write_back(running_mean, args.running_mean);
  write_back(running_var, args.running_var);
}

GroupStats stats_from_running(const Tensor& running_mean, const Tensor& running_var, double eps,
                              int64_t repeat) {
  const TensorOptions f64 = TensorOptions(kFloat64).device(running_mean.device());
  NormStatsFromRunningArgs args;
  args.running_mean = running_mean.contiguous();
  args.running_var = running_var.contiguous();
  args.mean = empty({repeat * running_mean.numel()}, f64);
  args.invstd = empty({repeat * running_mean.numel()}, f64);
  args.rows = repeat;
  args.eps = eps;
  norm_stats_from_running_stub(running_mean.device())(args);
  return {args.mean, Tensor(), args.invstd};
}

std::vector<int64_t> to_list(const NormGeometry& geo) { return {geo.A, geo.G, geo.K, geo.S, geo.P}; }

NormGeometry from_list(const std::vector<int64_t>& v) {
  MINIDL_ASSERT(v.size() == 5);
  return {v[0], v[1], v[2], v[3], v[4]};
}

void check_param(const Tensor& t, const char* name, int64_t expected, const Tensor& input,
                 const char* op) {
  if (!t.defined()) return;
  MINIDL_CHECK(t.device() == input.device(), op, ": expected ", name, " on ", input.device().str(),
               " (the input's device), got ", t.device().str());
  MINIDL_CHECK(t.numel() == expected, name, " should contain ", expected, " elements not ", t.numel());
  // PyTorch's mixed type: a float16/bfloat16 input with float32 parameters and
  // statistics (autocast, Apex O2's BatchNorm kept in float32); any other mix is refused.
  const bool mixed_ok = is_reduced_floating(input.dtype()) && t.dtype() == kFloat32;
  MINIDL_CHECK(t.dtype() == input.dtype() || mixed_ok, op,
               ": mixed dtype (CPU): expect parameter to have scalar type of ", dtype_name(input.dtype()),
               mixed_ok || !is_reduced_floating(input.dtype()) ? " (the input's)" : " (the input's) or float32",
               ", but ", name, " is ", dtype_name(t.dtype()));
}

void check_param_dtypes(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name, const char* op) {
  if (!a.defined() || !b.defined()) return;
  MINIDL_CHECK(a.dtype() == b.dtype(), op, ": mixed dtype: expect ", a_name, " and ", b_name,
               " to have one scalar type, but ", a_name, " is ", dtype_name(a.dtype()), " and ", b_name, " is ",
               dtype_name(b.dtype()));
}

}  // namespace minidl::norm
