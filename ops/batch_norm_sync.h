// The kernels of SyncBatchNorm's building blocks (declared in ops/batch_norm.h,
// implemented in ops/batch_norm_sync.cpp) beyond the shared normalization
// core (ops/norm_core.h): the count-weighted merge of the ranks' statistics
// and the per-channel operands of the backward's elementwise pass. PyTorch's
// counterparts are batch_norm_gather_stats_with_counts_cuda
// (batch_norm_reduce_statistics_kernel, which also updates the running
// statistics) and the count sum and weighting inside
// batch_norm_backward_elemt_cuda.
//
// Both run on the input's device and never read device memory on the host:
// a rank with count < 1 (an empty rank) gets zero weight inside the kernel,
// where PyTorch drops its row with a host sync; the total count stays a
// device tensor that the backward kernel reads (ops/norm_core.h's
// NormBackwardArgs::given_count_tensor).
#pragma once

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

// ---- kernel interface (a backend registers its kernels here) ----------------

// Chan's parallel merge per channel c, in double, over the ranks k in order
// (W ranks, n_k = counts_k; ranks with n_k < 1 are skipped: zero weight):
//   v_k = (1 / invstds_kc)^2 - eps                 (the rank's biased variance)
//   var_n += v_k n_k + (avg - means_kc)^2 n n_k / (n + n_k)
//   avg = n / (n + n_k) avg + n_k / (n + n_k) means_kc,  n += n_k
//   mean_c = avg,  invstd_c = n > 0 ? 1 / sqrt(var_n / n + eps) : 0
// and, when running_mean / running_var are defined and n > 0 (with no values
// anywhere there is nothing to learn), in place, computed in double:
//   running_mean_c = (1 - momentum) running_mean_c + momentum avg
//   running_var_c  = (1 - momentum) running_var_c  + momentum var_n / (n - 1)
// `momentum` is the factor actually applied (1 / num_batches_tracked for a
// cumulative average). n == 1 divides by zero, as PyTorch; callers check.
struct BatchNormGatherStatsArgs {
  Tensor means, invstds;  // float64 (W, C), contiguous
  Tensor counts;          // float64 (W), contiguous
  Tensor mean, invstd;    // outputs: float64 (C), contiguous
  Tensor running_mean, running_var;  // optional: (C), contiguous, one floating dtype
  double momentum = 0.1, eps = 1e-5;

  void for_each_tensor(auto&& f) const {
    for (const Tensor* t : {&means, &invstds, &counts, &mean, &invstd, &running_mean, &running_var}) f(*t);
  }
};

// The operands batch_norm_backward_elemt hands the normalization core's
// backward (the core wants w-weighted sums and one count), per channel c:
//   weighted_sum_dy_c = sum_dy_c w_c,  weighted_sum_dy_xmu_c = sum_dy_xmu_c w_c
// (float64 products; w = 1, the sums copied, without weight), and
//   total = sum over k of counts_k   (in order, double; N of the global batch)
struct BatchNormBackwardSumsArgs {
  Tensor sum_dy, sum_dy_xmu;  // float64 (C), contiguous: the all-reduced sums
  Tensor weight;              // optional: (C), contiguous, floating
  Tensor counts;              // float64 (W), contiguous
  Tensor weighted_sum_dy, weighted_sum_dy_xmu;  // outputs: float64 (C)
  Tensor total;                                 // output: float64, one element

  void for_each_tensor(auto&& f) const {
    for (const Tensor* t : {&sum_dy, &sum_dy_xmu, &weight, &counts, &weighted_sum_dy, &weighted_sum_dy_xmu, &total})
      f(*t);
  }
};

using BatchNormGatherStatsFn = void(const BatchNormGatherStatsArgs& args);
using BatchNormBackwardSumsFn = void(const BatchNormBackwardSumsArgs& args);
extern DispatchStub<BatchNormGatherStatsFn> batch_norm_gather_stats_stub;
extern DispatchStub<BatchNormBackwardSumsFn> batch_norm_backward_sums_stub;
void register_batch_norm_sync_cpu_kernels();  // ops/cpu/batch_norm_sync.cpp

}  // namespace minidl
