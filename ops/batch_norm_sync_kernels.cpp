// SyncBatchNorm's building blocks (PyTorch's batch_norm_stats,
// batch_norm_gather_stats_with_counts, batch_norm_elemt,
// batch_norm_backward_reduce, batch_norm_backward_elemt). Plain kernels, not
// autograd ops: SyncBatchNorm's own autograd Function calls them around its
// collectives. Per channel c over a rank's n_k = numel / C values:
//   stats:   mean_k, invstd_k = 1 / sqrt(var_k + eps)        (biased var)
//   gather:  Chan's merge over ranks with count >= 1:
//              var_k = 1/invstd_k^2 - eps
//              var_n += var_k n_k + (avg - mean_k)^2 n n_k / (n + n_k)
//              avg = (n avg + n_k mean_k) / (n + n_k),  n += n_k
//            mean = avg, invstd = 1 / sqrt(var_n / n + eps); running stats
//            updated in place with avg and the global unbiased var_n / (n - 1)
//   elemt:   y = (x - mean) invstd weight + bias
//   backward_reduce: sum_dy = sum dy, sum_dy_xmu = sum dy (x - mean),
//            grad_weight = sum_dy_xmu invstd, grad_bias = sum_dy   (local)
//   backward_elemt:  dx = (dy - sum_dy/N - (x - mean) invstd^2 sum_dy_xmu/N) invstd weight,
//            with the all-reduced sums and N = sum of the ranks' counts.
// Nothing is saved (no autograd); every result is a fresh tensor except the
// running statistics, which are overwritten in place. The heavy loops are the
// shared normalization core's (ops/norm_core.h, geometry A = N, G = C, K = 1).
#include <cmath>
#include <vector>

#include "ops/batch_norm.h"
#include "ops/norm_core.h"

namespace minidl {

namespace {

void check_input(const Tensor& input, const char* op) {
  MINIDL_CHECK(input.defined(), op, ": the input tensor is undefined");
  MINIDL_CHECK(input.dim() >= 2, op, ": expected input of shape (N, C, *) with at least 2 dims, got input of size ",
               shape_str(input.shape()));
  MINIDL_CHECK(is_floating(input.dtype()), "\"", op, "\" not implemented for '", dtype_name(input.dtype()), "'");
}

norm::NormGeometry bn_geometry(const Tensor& input) {
  const int64_t N = input.size(0), C = input.size(1);
  int64_t spatial = 1;
  for (int64_t d = 2; d < input.dim(); ++d) spatial *= input.size(d);
  return {N, C, 1, spatial, C};
}

// A per-channel statistic (mean, invstd, sums): defined, C values; as float64.
Tensor channel_f64(const Tensor& t, const char* name, int64_t C, const char* op) {
  MINIDL_CHECK(t.defined(), op, ": ", name, " is undefined");
  MINIDL_CHECK(t.numel() == C, op, ": expected ", name, " with ", C, " elements (one per channel), got ",
               shape_str(t.shape()));
  MINIDL_CHECK(is_floating(t.dtype()), op, ": expected a floating ", name, ", got ", dtype_name(t.dtype()));
  return t.to(kFloat64).contiguous().reshape({C});
}

// Host-computed values as a tensor of `like`'s dtype on its device.
Tensor with_dtype(const std::vector<double>& values, const Tensor& like) {
  return tensor(values, {static_cast<int64_t>(values.size())}, kFloat64).to(like.dtype()).to(like.device());
}

}  // namespace

BatchNormStats batch_norm_stats(const Tensor& input, double eps) {
  check_input(input, "batch_norm_stats");
  const norm::NormGeometry geo = bn_geometry(input);
  BatchNormStats out;
  out.count = geo.group_size();
  if (input.numel() == 0) {  // an empty rank still joins the collective, with zeros
    out.mean = zeros({geo.G}, TensorOptions(input.dtype()).device(input.device()));
    out.invstd = zeros({geo.G}, TensorOptions(input.dtype()).device(input.device()));
    return out;
  }
  const norm::GroupStats s = norm::moments(input.contiguous(), geo, eps);
  out.mean = s.mean.to(input.dtype());
  out.invstd = s.invstd.to(input.dtype());
  return out;
}

std::pair<Tensor, Tensor> batch_norm_gather_stats_with_counts(
    const Tensor& input_for_dtype, const Tensor& means, const Tensor& invstds,
    const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
    const Tensor& counts) {
  const char* op = "batch_norm_gather_stats_with_counts";
  MINIDL_CHECK(input_for_dtype.defined() && means.defined() && invstds.defined() && counts.defined(), op,
               ": input, mean, invstd and counts must be defined");
  MINIDL_CHECK(means.dim() == 2 && invstds.shape() == means.shape(), op,
               ": expected mean and invstd of shape (world_size, C), got ", shape_str(means.shape()), " and ",
               shape_str(invstds.shape()));
  const int64_t W = means.size(0), C = means.size(1);
  MINIDL_CHECK(counts.numel() == W, op, ": expected one count per rank (", W, "), got counts of size ",
               shape_str(counts.shape()));
  MINIDL_CHECK(running_mean.defined() == running_var.defined(), op,
               ": running_mean and running_var must either both be None or neither be None");
  if (running_mean.defined()) {
    MINIDL_CHECK(running_mean.numel() == C, "running_mean should contain ", C, " elements not ", running_mean.numel());
    MINIDL_CHECK(running_var.numel() == C, "running_var should contain ", C, " elements not ", running_var.numel());
  }
  // TODO(cuda): the merge runs on the host: the gathered statistics are copied
  // here and the results copied back to the input's device. A device merge
  // kernel (PyTorch's batch_norm_gather_stats_with_counts_cuda) replaces this.
  const std::vector<double> m = means.to_vector<double>(), is = invstds.to_vector<double>();
  const std::vector<double> cnt = counts.to_vector<double>();

  std::vector<double> mean(static_cast<size_t>(C)), invstd(static_cast<size_t>(C)), unbiased(static_cast<size_t>(C));
  double total = 0;
  for (int64_t c = 0; c < C; ++c) {
    double n = 0, avg = 0, var_n = 0;
    for (int64_t w = 0; w < W; ++w) {
      const double nk = cnt[w];
      if (nk < 1) continue;  // an empty rank carries no statistics
      const double mk = m[w * C + c];
      const double sd = 1.0 / is[w * C + c];
      const double vk = (sd * sd - eps) * nk;
      const double factor = 1.0 / (n + nk);
      var_n += vk + (avg - mk) * (avg - mk) * n * nk * factor;
      avg = n * factor * avg + nk * factor * mk;
      n += nk;
    }
    mean[c] = avg;
    invstd[c] = n > 0 ? 1.0 / std::sqrt(var_n / n + eps) : 0.0;
    unbiased[c] = var_n / (n - 1);
    total = n;
  }
  // With no values anywhere there is nothing to learn: the running stats stay.
  if (running_mean.defined() && total > 0) {
    norm::update_running(running_mean, mean, momentum);
    norm::update_running(running_var, unbiased, momentum);
  }
  return {with_dtype(mean, input_for_dtype), with_dtype(invstd, input_for_dtype)};
}

Tensor batch_norm_elemt(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const Tensor& mean, const Tensor& invstd, double eps) {
  const char* op = "batch_norm_elemt";
  check_input(input, op);
  const norm::NormGeometry geo = bn_geometry(input);
  norm::check_param(weight, "weight", geo.G, input, op);
  norm::check_param(bias, "bias", geo.G, input, op);
  norm::GroupStats stats{channel_f64(mean, "mean", geo.G, op), Tensor(), channel_f64(invstd, "invstd", geo.G, op)};
  if (input.numel() == 0) return empty(input.shape(), TensorOptions(input.dtype()).device(input.device()));
  return norm::forward(input.contiguous(), geo, weight, bias, eps, false, stats);
}

BatchNormBackwardReduce batch_norm_backward_reduce(const Tensor& grad_out, const Tensor& input,
                                                   const Tensor& mean, const Tensor& invstd,
                                                   const Tensor& weight, bool input_g,
                                                   bool weight_g, bool bias_g) {
  const char* op = "batch_norm_backward_reduce";
  check_input(input, op);
  MINIDL_CHECK(grad_out.defined() && grad_out.shape() == input.shape() && grad_out.dtype() == input.dtype(), op,
               ": expected grad_out like the input (", dtype_name(input.dtype()), " ", shape_str(input.shape()),
               "), got ", grad_out.defined() ? shape_str(grad_out.shape()) : "an undefined tensor");
  const norm::NormGeometry geo = bn_geometry(input);
  norm::check_param(weight, "weight", geo.G, input, op);
  const TensorOptions opts = input.options();
  BatchNormBackwardReduce out;
  if (!input_g && !weight_g && !bias_g) return out;

  norm::NormBackwardArgs args;
  args.grad_out = grad_out.contiguous();
  args.input = input.contiguous();
  args.geo = geo;
  args.mean = channel_f64(mean, "mean", geo.G, op);
  args.invstd = channel_f64(invstd, "invstd", geo.G, op);
  // No weight: the sums are the plain sum(dy) and sum(dy (x - mean)).
  if (input_g) {
    args.out_sum_dy = empty({geo.G}, TensorOptions(kFloat64).device(input.device()));
    args.out_sum_dy_xmu = empty({geo.G}, TensorOptions(kFloat64).device(input.device()));
  }
  if (weight_g) args.grad_weight = out.grad_weight = empty({geo.G}, opts);
  if (bias_g) args.grad_bias = out.grad_bias = empty({geo.G}, opts);
  norm::norm_backward_stub(input.device())(args);
  if (input_g) {
    out.sum_dy = args.out_sum_dy.to(input.dtype());
    out.sum_dy_xmu = args.out_sum_dy_xmu.to(input.dtype());
  }
  return out;
}

Tensor batch_norm_backward_elemt(const Tensor& grad_out, const Tensor& input, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                                 const Tensor& sum_dy_xmu, const Tensor& count) {
  const char* op = "batch_norm_backward_elemt";
  check_input(input, op);
  MINIDL_CHECK(grad_out.defined() && grad_out.shape() == input.shape() && grad_out.dtype() == input.dtype(), op,
               ": expected grad_out like the input (", dtype_name(input.dtype()), " ", shape_str(input.shape()),
               "), got ", grad_out.defined() ? shape_str(grad_out.shape()) : "an undefined tensor");
  MINIDL_CHECK(count.defined(), op, ": count is undefined");
  const norm::NormGeometry geo = bn_geometry(input);
  norm::check_param(weight, "weight", geo.G, input, op);
  double total = 0;
  for (double c : count.to_vector<double>()) total += c;

  norm::NormBackwardArgs args;
  args.mean = channel_f64(mean, "mean", geo.G, op);
  args.invstd = channel_f64(invstd, "invstd", geo.G, op);
  // The kernel wants the w-weighted sums.
  std::vector<double> s1 = channel_f64(sum_dy, "sum_dy", geo.G, op).to_vector<double>();
  std::vector<double> s2 = channel_f64(sum_dy_xmu, "sum_dy_xmu", geo.G, op).to_vector<double>();
  if (weight.defined()) {
    const std::vector<double> w = weight.to_vector<double>();
    for (int64_t c = 0; c < geo.G; ++c) s1[c] *= w[c], s2[c] *= w[c];
  }
  if (input.numel() == 0) return empty(input.shape(), TensorOptions(input.dtype()).device(input.device()));
  MINIDL_CHECK(total > 0, op, ": the counts sum to ", total, "; expected at least one value per channel");
  args.grad_out = grad_out.contiguous();
  args.input = input.contiguous();
  args.weight = weight.defined() ? weight.contiguous() : weight;
  args.geo = geo;
  args.batch_stats = true;
  // TODO(cuda): the weighting above runs on the host (a round trip per backward).
  args.given_sum_dy = tensor(s1, {geo.G}, kFloat64).to(input.device());
  args.given_sum_dy_xmu = tensor(s2, {geo.G}, kFloat64).to(input.device());
  args.given_count = total;
  args.grad_input = empty(input.shape(), input.options());
  norm::norm_backward_stub(input.device())(args);
  return args.grad_input;
}

}  // namespace minidl
