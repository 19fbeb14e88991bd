// Batch normalization over (N, C, *) (PyTorch's F.batch_norm). Per channel c,
// over its n = N * prod(*) values:
//   training: mean_c = sum x / n, var_c = sum (x - mean_c)^2 / n (biased)
//   eval:     mean_c = running_mean_c, var_c = running_var_c (norm::stats_from_running)
//   y = (x - mean_c) / sqrt(var_c + eps) * weight_c + bias_c
// Training also updates the running statistics in place on their device (no
// grad, version bumped; norm::update_running_stats):
//   running_mean = (1 - momentum) running_mean + momentum mean_c
//   running_var  = (1 - momentum) running_var  + momentum var_c n / (n - 1)   (unbiased)
// Backward (xhat = (x - mean) invstd, g = dy * weight, sums over the channel):
//   training: dx = invstd (g - sum g / n - xhat sum(g xhat) / n)
//   eval:     dx = invstd g   (the statistics are constants)
//   dweight = sum dy xhat,  dbias = sum dy
// Saves the input, the weight and the float64 per-channel mean and invstd it
// used (ops/norm_core.h: A = N, G = C, K = 1, S = prod(*); a channels-last
// input: A = N*H*W, G = C, K = S = 1, and a channels-last result). Gradients
// are fresh tensors; the engine accumulates them.
#include "minidl/ops/batch_norm.h"

#include "minidl/core/autograd/function.h"
#include "minidl/ops/norm_core.h"

namespace minidl {

namespace {

struct BatchNormName {
  static constexpr const char* kName = "BatchNorm";
};
using BatchNorm = norm::NormFunction<BatchNormName>;

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  MINIDL_CHECK(input.defined(), "batch_norm: the input tensor is undefined");
  MINIDL_CHECK(input.dim() >= 2, "batch_norm: expected input of shape (N, C, *) with at least 2 dims, got input of size ",
               shape_str(input.shape()));
  MINIDL_CHECK(is_floating(input.dtype()), "\"batch_norm\" not implemented for '", dtype_name(input.dtype()), "'");
  if (!training) {
    MINIDL_CHECK(running_mean.defined(), "running_mean must be defined in evaluation mode");
    MINIDL_CHECK(running_var.defined(), "running_var must be defined in evaluation mode");
  }
  MINIDL_CHECK(running_mean.defined() == running_var.defined(),
               "running_mean and running_var must either both be None or neither be None");
  const int64_t N = input.size(0), C = input.size(1);
  int64_t spatial = 1;
  for (int64_t d = 2; d < input.dim(); ++d) spatial *= input.size(d);
  norm::check_param(running_mean, "running_mean", C, input, "batch_norm");
  norm::check_param(running_var, "running_var", C, input, "batch_norm");
  norm::check_param(weight, "weight", C, input, "batch_norm");
  norm::check_param(bias, "bias", C, input, "batch_norm");
  norm::check_param_dtypes(weight, "weight", bias, "bias", "batch_norm");
  norm::check_param_dtypes(running_mean, "running_mean", running_var, "running_var", "batch_norm");
  const int64_t n = N * spatial;  // values per channel
  if (training)
    MINIDL_CHECK(n != 1, "Expected more than 1 value per channel when training, got input size ",
                 shape_str(input.shape()));

  norm::GroupStats stats;
  if (!training) stats = norm::stats_from_running(running_mean, running_var, eps);
  Tensor y;
  if (input.suggest_memory_format() == MemoryFormat::ChannelsLast) {
    // NHWC: N*H*W rows of C values, a group per channel that is a column
    // (A = N*H*W, K = S = 1), read through the NHWC view of the same memory
    // (contiguous: no copy); the result and dx come back channels-last.
    const norm::NormGeometry geo{N * spatial, C, 1, 1, C};
    y = BatchNorm::apply(input.permute({0, 2, 3, 1}), weight, bias, geo, eps, training, &stats).permute({0, 3, 1, 2});
  } else {
    const norm::NormGeometry geo{N, C, 1, spatial, C};
    y = BatchNorm::apply(input, weight, bias, geo, eps, training, &stats);
  }

  if (training && running_mean.defined() && input.numel() > 0)  // on the statistics' device
    norm::update_running_stats(running_mean, running_var, stats.mean, stats.var, 1, n, momentum);
  return y;
}

}  // namespace minidl
