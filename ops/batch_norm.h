// Batch normalization (PyTorch's F.batch_norm) and the SyncBatchNorm building
// blocks (torch.batch_norm_stats, batch_norm_gather_stats_with_counts,
// batch_norm_elemt, batch_norm_backward_reduce, batch_norm_backward_elemt).
#pragma once

#include <cstdint>
#include <utility>

#include "minidl/core/tensor.h"

namespace minidl {

// input: (N, C, *) with 2 to 5 dims. Statistics are per channel over N and the
// spatial dims (n = numel / C values each).
//   training: y = (x - mean) / sqrt(var_biased + eps) * weight + bias, and, when
//     running_mean / running_var are defined, they are updated IN PLACE (no
//     grad, version bumped):
//       running_mean = (1 - momentum) * running_mean + momentum * mean
//       running_var  = (1 - momentum) * running_var  + momentum * var_biased * n / (n - 1)
//     `momentum` is the factor actually applied (the module turns momentum=None
//     into 1 / num_batches_tracked). n == 1 throws "Expected more than 1 value
//     per channel when training, got input size [1, 2]".
//   eval (training=false): normalizes with running_mean / running_var, which
//     must then be defined.
// weight and bias (shape (C)) are optional: pass Tensor() to skip the affine.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  bool training = false, double momentum = 0.1, double eps = 1e-5);

// ---- SyncBatchNorm building blocks -------------------------------------------
// Plain kernels (not autograd ops): SyncBatchNorm's autograd function calls
// them around its collectives, as PyTorch's _functions.py does. Each runs on
// the input's device, where all its tensors must be, and reads nothing back to
// the host (ops/batch_norm_sync.cpp; kernels in ops/batch_norm_sync.h).

// Dtypes, as PyTorch's: a float16/bfloat16 input takes float32 or same-dtype
// weight, bias and running statistics; the statistics and sums below are
// float32 for it (PyTorch's accumulate type), the input's dtype otherwise;
// parameter gradients come in the weight's dtype.

// Per-channel mean and invstd = 1 / sqrt(var_biased + eps) of a local (N, C, *)
// input; count = numel / C. An empty input gives count 0 and zero mean/invstd.
struct BatchNormStats {
  Tensor mean;    // (C)
  Tensor invstd;  // (C)
  int64_t count = 0;
};
BatchNormStats batch_norm_stats(const Tensor& input, double eps);

// Merges per-rank statistics (rows of means/invstds, shape (W, C)) weighted by
// counts (shape (W), any numeric dtype) with Chan's parallel algorithm; ranks
// with count < 1 weigh zero (PyTorch drops them with a host sync; the result
// is the same). Returns the global (mean, invstd). If defined, running_mean /
// running_var are updated in place with the global mean and the global
// unbiased variance var_n / (n - 1) (left alone when every count is 0).
// input_for_dtype names the device of the result and, through its dtype, the
// result's (float32 for a 16-bit input).
std::pair<Tensor, Tensor> batch_norm_gather_stats_with_counts(
    const Tensor& input_for_dtype, const Tensor& means, const Tensor& invstds,
    const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
    const Tensor& counts);

// y = (x - mean) * invstd * weight + bias per channel (weight/bias optional).
// eps is unused (invstd already includes it); kept for PyTorch's signature.
Tensor batch_norm_elemt(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const Tensor& mean, const Tensor& invstd, double eps);

// Local per-channel reductions of the backward:
//   sum_dy = sum(dy), sum_dy_xmu = sum(dy * (x - mean))    (if input_g)
//   grad_weight = sum_dy_xmu * invstd                       (if weight_g)
//   grad_bias = sum_dy                                      (if bias_g)
// Outputs not asked for are undefined.
struct BatchNormBackwardReduce {
  Tensor sum_dy, sum_dy_xmu, grad_weight, grad_bias;
};
BatchNormBackwardReduce batch_norm_backward_reduce(const Tensor& grad_out, const Tensor& input,
                                                   const Tensor& mean, const Tensor& invstd,
                                                   const Tensor& weight, bool input_g,
                                                   bool weight_g, bool bias_g);

// dx = (dy - sum_dy / N - (x - mean) * invstd^2 * sum_dy_xmu / N) * invstd * weight
// with sum_dy / sum_dy_xmu the GLOBAL (all-reduced) sums and N = sum(count)
// over the per-rank counts (int64 or floating), summed on the device. weight
// optional (1). On the CPU, N == 0 is an error; a device run divides by it.
Tensor batch_norm_backward_elemt(const Tensor& grad_out, const Tensor& input, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                                 const Tensor& sum_dy_xmu, const Tensor& count);

}  // namespace minidl
