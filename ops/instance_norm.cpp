// Instance normalization over (N, C, *) (PyTorch's F.instance_norm): batch
// norm of the input viewed as (1, N*C, *), so each (n, c) instance has its own
// statistics over its S = prod(*) spatial values:
//   use_input_stats: mean = sum x / S, var = sum (x - mean)^2 / S (biased)
//   otherwise:       mean = running_mean_c, var = running_var_c
//   y = (x - mean) / sqrt(var + eps) * weight_c + bias_c
// With use_input_stats and running stats, PyTorch repeats the running stats N
// times, lets batch_norm update each copy with its instance, and stores the
// mean over n of the copies; that equals (done here directly, on the
// statistics' device by norm::update_running_stats with its N rows):
//   running_mean_c = (1 - m) running_mean_c + m mean_n(mean_nc)
//   running_var_c  = (1 - m) running_var_c  + m mean_n(var_nc S / (S - 1))
// Backward: batch norm's per instance (ops/batch_norm.cpp), dweight_c and
// dbias_c summed over the N instances of channel c. Saves the input, the
// weight and the float64 per-instance mean and invstd (ops/norm_core.h:
// A = 1, G = N*C, K = 1, S = prod(*), P = C). Gradients are fresh tensors.
#include "minidl/ops/instance_norm.h"

#include "minidl/core/autograd/function.h"
#include "minidl/ops/norm_core.h"

namespace minidl {

namespace {

struct InstanceNormName {
  static constexpr const char* kName = "InstanceNorm";
};
using InstanceNorm = norm::NormFunction<InstanceNormName>;

}  // namespace

Tensor instance_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool use_input_stats,
                     double momentum, double eps) {
  MINIDL_CHECK(input.defined(), "instance_norm: the input tensor is undefined");
  MINIDL_CHECK(input.dim() >= 2, "instance_norm: expected input of shape (N, C, *) with at least 2 dims, got input of size ",
               shape_str(input.shape()));
  MINIDL_CHECK(is_floating(input.dtype()), "\"instance_norm\" not implemented for '", dtype_name(input.dtype()), "'");
  if (!use_input_stats)
    MINIDL_CHECK(running_mean.defined() && running_var.defined(),
                 "Expected running_mean and running_var to be defined when use_input_stats is false");
  MINIDL_CHECK(running_mean.defined() == running_var.defined(),
               "running_mean and running_var must either both be None or neither be None");
  const int64_t N = input.size(0), C = input.size(1);
  int64_t spatial = 1;
  for (int64_t d = 2; d < input.dim(); ++d) spatial *= input.size(d);
  norm::check_param(running_mean, "running_mean", C, input, "instance_norm");
  norm::check_param(running_var, "running_var", C, input, "instance_norm");
  norm::check_param(weight, "weight", C, input, "instance_norm");
  norm::check_param(bias, "bias", C, input, "instance_norm");
  norm::check_param_dtypes(weight, "weight", bias, "bias", "instance_norm");
  norm::check_param_dtypes(running_mean, "running_mean", running_var, "running_var", "instance_norm");
  if (use_input_stats)
    MINIDL_CHECK(spatial != 1, "Expected more than 1 spatial element when training, got input size ",
                 shape_str(input.shape()));

  const norm::NormGeometry geo{1, N * C, 1, spatial, C};
  norm::GroupStats stats;
  if (!use_input_stats) stats = norm::stats_from_running(running_mean, running_var, eps, N);
  Tensor y = InstanceNorm::apply(input, weight, bias, geo, eps, use_input_stats, &stats);

  if (use_input_stats && running_mean.defined() && input.numel() > 0)  // on the statistics' device
    norm::update_running_stats(running_mean, running_var, stats.mean, stats.var, N, spatial, momentum);
  return y;
}

}  // namespace minidl
