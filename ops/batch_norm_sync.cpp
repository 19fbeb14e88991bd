// SyncBatchNorm's building blocks (PyTorch's batch_norm_stats,
// batch_norm_gather_stats_with_counts, batch_norm_elemt,
// batch_norm_backward_reduce, batch_norm_backward_elemt): the checks and the
// API declared in ops/batch_norm.h. Plain kernels, not autograd ops:
// SyncBatchNorm's own autograd Function calls them around its collectives.
// Per channel c over a rank's n_k = numel / C values:
//   stats:   mean_k, invstd_k = 1 / sqrt(var_k + eps)        (biased var)
//   gather:  Chan's merge over the ranks, an empty one (count < 1) weighing zero:
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
// Dtypes (PyTorch's): a float16/bfloat16 input takes float32 or same-dtype
// weight, bias and running statistics; statistics and sums come back float32
// for it (the input's dtype otherwise), parameter gradients in the weight's.
// Nothing is saved (no autograd); every result is a fresh tensor except the
// running statistics, which are overwritten in place. Every step runs on the
// input's device with no host read: the heavy loops are the shared
// normalization core's (ops/norm_core.h, geometry A = N, G = C, K = 1), the
// merge and the backward's weighted sums and N are ops/batch_norm_sync.h's
// kernels (N stays a device tensor). Only on the CPU, where reading is free,
// does backward_elemt check that N > 0.
#include "minidl/core/autograd/grad_mode.h"
#include "minidl/ops/batch_norm.h"
#include "minidl/ops/batch_norm_sync.h"
#include "minidl/ops/norm_core.h"

namespace minidl {

DispatchStub<BatchNormGatherStatsFn> batch_norm_gather_stats_stub("batch_norm_gather_stats_with_counts");
DispatchStub<BatchNormBackwardSumsFn> batch_norm_backward_sums_stub("batch_norm_backward_elemt_sums");

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

Tensor contiguous_or_undefined(const Tensor& t) { return t.defined() ? t.contiguous() : t; }

// The dtype of the statistics and sums these blocks return: float32 for a
// float16/bfloat16 input (PyTorch's accumulate type, so nothing crosses the
// ranks rounded to 16 bits), else the input's.
DType stats_dtype(const Tensor& input) { return is_reduced_floating(input.dtype()) ? kFloat32 : input.dtype(); }

}  // namespace

BatchNormStats batch_norm_stats(const Tensor& input, double eps) {
  check_input(input, "batch_norm_stats");
  const norm::NormGeometry geo = bn_geometry(input);
  BatchNormStats out;
  out.count = geo.group_size();
  const DType sd = stats_dtype(input);
  const TensorOptions opts = TensorOptions(sd).device(input.device());
  if (input.numel() == 0) {  // an empty rank still joins the collective, with zeros
    out.mean = zeros({geo.G}, opts);
    out.invstd = zeros({geo.G}, opts);
    return out;
  }
  const norm::GroupStats s = norm::moments(input.contiguous(), geo, eps);
  out.mean = s.mean.to(sd);
  out.invstd = s.invstd.to(sd);
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
  // The merge and the running-stat update run on the input's device: no host
  // read (ops/batch_norm_sync.h). Empty ranks get zero weight in the kernel.
  const Tensor rm = contiguous_or_undefined(running_mean), rv = contiguous_or_undefined(running_var);
  if (rm.defined())
    MINIDL_CHECK(is_floating(rm.dtype()) && rv.dtype() == rm.dtype(), op,
                 ": expected running_mean and running_var of one floating dtype, got ", dtype_name(rm.dtype()),
                 " and ", dtype_name(rv.dtype()));
  const Device device = input_for_dtype.device();  // every tensor must be there (the stub checks)
  const TensorOptions f64 = TensorOptions(kFloat64).device(device);
  BatchNormGatherStatsArgs args;
  args.means = means.to(kFloat64).contiguous();
  args.invstds = invstds.to(kFloat64).contiguous();
  args.counts = counts.to(kFloat64).contiguous().reshape({W});
  args.mean = empty({C}, f64);
  args.invstd = empty({C}, f64);
  args.running_mean = rm;
  args.running_var = rv;
  args.momentum = momentum;
  args.eps = eps;
  batch_norm_gather_stats_stub(device)(args);
  // Updated in place (no grad), version bumped as copy_ would: whether the
  // kernel changed anything (n > 0) is only known on the device.
  auto write_back = [](const Tensor& updated, const Tensor& target) {
    if (updated.is_same(target)) return target.bump_version();
    NoGradGuard no_grad;  // a non-contiguous buffer: the kernel updated a copy
    Tensor(target).copy_(updated);
  };
  if (rm.defined()) write_back(rm, running_mean), write_back(rv, running_var);
  return {args.mean.to(stats_dtype(input_for_dtype)), args.invstd.to(stats_dtype(input_for_dtype))};
}

Tensor batch_norm_elemt(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const Tensor& mean, const Tensor& invstd, double eps) {
  const char* op = "batch_norm_elemt";
  check_input(input, op);
  const norm::NormGeometry geo = bn_geometry(input);
  norm::check_param(weight, "weight", geo.G, input, op);
  norm::check_param(bias, "bias", geo.G, input, op);
  norm::check_param_dtypes(weight, "weight", bias, "bias", op);
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
  // Parameter gradients in the weight's dtype (float32 next to a 16-bit input).
  const TensorOptions param_opts = weight.defined() ? weight.options() : opts;
  if (weight_g) args.grad_weight = out.grad_weight = empty({geo.G}, param_opts);
  if (bias_g) args.grad_bias = out.grad_bias = empty({geo.G}, param_opts);
  norm::norm_backward_stub(input.device())(args);
  if (input_g) {
    out.sum_dy = args.out_sum_dy.to(stats_dtype(input));
    out.sum_dy_xmu = args.out_sum_dy_xmu.to(stats_dtype(input));
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

  norm::NormBackwardArgs args;
  args.mean = channel_f64(mean, "mean", geo.G, op);
  args.invstd = channel_f64(invstd, "invstd", geo.G, op);
  BatchNormBackwardSumsArgs sums;
  sums.sum_dy = channel_f64(sum_dy, "sum_dy", geo.G, op);
  sums.sum_dy_xmu = channel_f64(sum_dy_xmu, "sum_dy_xmu", geo.G, op);
  if (input.numel() == 0) return empty(input.shape(), input.options());
  // The core's backward wants the w-weighted sums and N = sum(count): both
  // made on the input's device, N a one-element tensor the kernel reads.
  const TensorOptions f64 = TensorOptions(kFloat64).device(input.device());
  sums.weight = contiguous_or_undefined(weight);
  sums.counts = count.to(kFloat64).contiguous().reshape({count.numel()});
  sums.weighted_sum_dy = empty({geo.G}, f64);
  sums.weighted_sum_dy_xmu = empty({geo.G}, f64);
  sums.total = empty({1}, f64);
  batch_norm_backward_sums_stub(input.device())(sums);
  // A check needs N on the host: free on the CPU; elsewhere it would be a
  // synchronizing read per step, so a device run (as PyTorch's CUDA one)
  // divides by a zero N instead.
  if (input.device().is_cpu()) {
    const double total = sums.total.data_ptr<double>()[0];
    MINIDL_CHECK(total > 0, op, ": the counts sum to ", total, "; expected at least one value per channel");
  }
  args.grad_out = grad_out.contiguous();
  args.input = input.contiguous();
  args.weight = sums.weight;
  args.geo = geo;
  args.batch_stats = true;
  args.given_sum_dy = sums.weighted_sum_dy;
  args.given_sum_dy_xmu = sums.weighted_sum_dy_xmu;
  args.given_count_tensor = sums.total;
  args.grad_input = empty(input.shape(), input.options());
  norm::norm_backward_stub(input.device())(args);
  return args.grad_input;
}

}  // namespace minidl
