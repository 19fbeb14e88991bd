// The one statistics core and the one backward core that BatchNorm,
// InstanceNorm, GroupNorm, LayerNorm and SyncBatchNorm's building blocks share.
//
// Every normalization views its contiguous input as (A, G, K, S):
//   element (a, g, k, s) sits at ((a * G + g) * K + k) * S + s,
//   statistics are per g over (a, k, s)   (M = A * K * S values),
//   its affine parameter is channel c = (g % P) * K + k.
//
//               A    G          K              S      P
//   BatchNorm   N    C          1              HW     C
//   InstanceNorm 1   N*C        1              HW     C
//   GroupNorm   1    N*groups   C/groups       HW     groups
//   LayerNorm   1    rows       prod(normalized_shape) 1  1
//
// Statistics: per group, each contiguous run of at most kChunk values is
// reduced exactly with two passes in double (mean, then sum of squared
// deviations), and the runs are merged with Chan's parallel formula; the
// variance is biased (M2 / M).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "minidl/core/autograd/function.h"
#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl::norm {

// ---- kernel interface (a backend registers its kernels here) ----------------
// (register_norm_cpu_kernels, in namespace minidl, is declared at the end.)

// The (A, G, K, S) view above, and P: groups per affine parameter set.
struct NormGeometry {
  int64_t A = 1, G = 1, K = 1, S = 1, P = 1;
  int64_t group_size() const { return A * K * S; }  // M, values per statistic
  int64_t numel() const { return A * G * K * S; }
  int64_t channels() const { return P * K; }  // affine parameters
};

// Forward: y = (x - mean_g) * invstd_g * w_c + b_c (w, b optional).
// use_input_stats: mean, var (biased) and invstd = 1/sqrt(var + eps) are
// computed per group and written to the (G) arrays; otherwise mean and invstd
// are read from them. An undefined output computes the statistics only.
struct NormForwardArgs {
  Tensor input, output, weight, bias;  // contiguous
  NormGeometry geo;
  double eps = 1e-5;
  bool use_input_stats = true;
  // float64 (G) tensors on the input's device.
  Tensor mean, invstd;
  Tensor var;  // written when use_input_stats (optional)

  // The tensor whose dtype the parameters have (float32 or the input's next
  // to a 16-bit input; a kernel's template argument): the weight, else the bias.
  const Tensor& param_dtype_source() const { return weight.defined() ? weight : bias; }

  void for_each_tensor(auto&& f) const {
    for (const Tensor* t : {&input, &output, &weight, &bias, &mean, &invstd, &var}) f(*t);
  }
};

// Backward. With xmu = x - mean_g and w_c (1 without weight), per group:
//   sum_dy = sum(w_c * dy), sum_dy_xmu = sum(w_c * dy * xmu)
//   grad_weight_c = sum over its groups of invstd_g * sum(dy * xmu),  grad_bias_c = sum(dy)
//   batch_stats:  dx = (w_c * dy - sum_dy / count - xmu * invstd^2 * sum_dy_xmu / count) * invstd
//   otherwise (statistics were constants): dx = w_c * dy * invstd
// The sums come from this input (count = M) unless given (SyncBN passes the
// all-reduced sums and the global count, as given_count_tensor, a float64
// one-element tensor on the device that the kernel reads, so the host never
// does; given_count is used when it is undefined). Undefined outputs are skipped;
// gradients are written (overwrite), never accumulated.
struct NormBackwardArgs {
  Tensor grad_out, input, weight;  // contiguous; weight optional
  NormGeometry geo;
  Tensor mean, invstd;  // float64 (G)
  Tensor grad_input, grad_weight, grad_bias;  // outputs, each optional
  bool batch_stats = true;
  Tensor given_sum_dy, given_sum_dy_xmu;  // float64 (G), w-weighted, with given_count
  double given_count = 0;
  Tensor given_count_tensor;  // float64, one element; overrides given_count when defined
  Tensor out_sum_dy, out_sum_dy_xmu;  // float64 (G), optional: the local w-weighted sums

  // As NormForwardArgs's: the weight, else grad_weight (batch_norm_backward_reduce
  // passes no weight, its sums being unweighted, yet may want the weight's
  // gradient in float32 next to a 16-bit input), else grad_bias.
  const Tensor& param_dtype_source() const {
    return weight.defined() ? weight : grad_weight.defined() ? grad_weight : grad_bias;
  }

  void for_each_tensor(auto&& f) const {
    for (const Tensor* t : {&grad_out, &input, &weight, &mean, &invstd, &grad_input, &grad_weight,
                            &grad_bias, &given_sum_dy, &given_sum_dy_xmu, &given_count_tensor, &out_sum_dy,
                            &out_sum_dy_xmu})
      f(*t);
  }
};

// Running statistics, updated in place on their device (PyTorch's):
//   batch_mean_c = mean over the R rows of batch_mean[r * C + c]
//   batch_var_c  = mean over the R rows of batch_var[r * C + c] * var_correction
//   running_mean = (1 - momentum) running_mean + momentum batch_mean_c
//   running_var  = (1 - momentum) running_var  + momentum batch_var_c
// R = 1 for BatchNorm; InstanceNorm passes its N rows of per-instance stats.
// var_correction is Bessel's n / (n - 1) for the n values behind each biased
// variance (1 if batch_var is already unbiased). Sums are in double in row
// order; the result is rounded once to the running stats' dtype.
struct NormRunningStatsArgs {
  Tensor running_mean, running_var;  // (C), contiguous, float32/64, written in place
  Tensor batch_mean, batch_var;      // float64 (R * C), contiguous
  int64_t rows = 1;                  // R
  double var_correction = 1.0;
  double momentum = 0.1;

  void for_each_tensor(auto&& f) const {
    for (const Tensor* t : {&running_mean, &running_var, &batch_mean, &batch_var}) f(*t);
  }
};

// Eval statistics from the running ones, repeated R times (InstanceNorm: R = N):
//   mean[r * C + c] = running_mean_c,  invstd[r * C + c] = 1 / sqrt(running_var_c + eps)
struct NormStatsFromRunningArgs {
  Tensor running_mean, running_var;  // (C), contiguous, float32/64
  Tensor mean, invstd;               // float64 (R * C), written
  int64_t rows = 1;                  // R
  double eps = 1e-5;

  void for_each_tensor(auto&& f) const {
    for (const Tensor* t : {&running_mean, &running_var, &mean, &invstd}) f(*t);
  }
};

using NormForwardFn = void(const NormForwardArgs& args);
using NormBackwardFn = void(const NormBackwardArgs& args);
using NormUpdateRunningStatsFn = void(const NormRunningStatsArgs& args);
using NormStatsFromRunningFn = void(const NormStatsFromRunningArgs& args);
extern DispatchStub<NormForwardFn> norm_forward_stub;
extern DispatchStub<NormBackwardFn> norm_backward_stub;
extern DispatchStub<NormUpdateRunningStatsFn> norm_update_running_stats_stub;
extern DispatchStub<NormStatsFromRunningFn> norm_stats_from_running_stub;

// ---- Tensor-level helpers used by the op files ------------------------------

// Per-group statistics as float64 (G) tensors.
struct GroupStats {
  Tensor mean, var, invstd;
};

// Runs the forward kernel on contiguous x; with use_input_stats the returned
// stats are computed, otherwise `given` (mean, invstd) is used and returned.
Tensor forward(const Tensor& x, const NormGeometry& geo, const Tensor& weight, const Tensor& bias,
               double eps, bool use_input_stats, GroupStats& stats);

// The statistics alone (no output).
GroupStats moments(const Tensor& x, const NormGeometry& geo, double eps);

struct Grads {
  Tensor input, weight, bias;
};
// Backward of forward(); mean/invstd are the float64 (G) stats forward used.
// bias_dtype: the bias's dtype, which grad_bias takes when there is no weight
// (default: the input's).
Grads backward(const Tensor& grad_out, const Tensor& x, const NormGeometry& geo,
               const Tensor& weight, const Tensor& mean, const Tensor& invstd, bool batch_stats,
               bool need_input, bool need_weight, bool need_bias,
               std::optional<DType> bias_dtype = std::nullopt);

// The bodies of every normalization's autograd Function, whose forward
// arguments are (input, weight, bias, geometry, eps, use_input_stats,
// GroupStats* stats): forward saves the contiguous input, the weight and the
// float64 (G) mean/invstd it used; backward returns the gradients of input,
// weight and bias (fresh tensors, in their shapes) and nothing for the rest.
Tensor autograd_forward(AutogradContext* ctx, const Tensor& input, const Tensor& weight,
                        const Tensor& bias, const NormGeometry& geo, double eps,
                        bool use_input_stats, GroupStats& stats);
variable_list autograd_backward(AutogradContext* ctx, const variable_list& grads);

// The autograd Function of each normalization; Name gives the node its name
// (struct BatchNormName { static constexpr const char* kName = "BatchNorm"; }).
template <class Name>
struct NormFunction : autograd::Function<NormFunction<Name>> {
  static constexpr const char* kName = Name::kName;
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& weight,
                        const Tensor& bias, const NormGeometry& geo, double eps,
                        bool use_input_stats, GroupStats* stats) {
    return autograd_forward(ctx, input, weight, bias, geo, eps, use_input_stats, *stats);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return autograd_backward(ctx, grads);
  }
};

// Running statistics on their device (the kernel above), in place (no
// autograd, version bumped): batch_mean / batch_var are float64 (rows * C)
// tensors on the running stats' device, batch_var biased over `count` values
// each, so it is scaled by count / (count - 1).
void update_running_stats(const Tensor& running_mean, const Tensor& running_var, const Tensor& batch_mean,
                          const Tensor& batch_var, int64_t rows, int64_t count, double momentum);
// float64 mean / invstd = 1/sqrt(var + eps) (repeat * C) tensors on the
// running stats' device, made from running_mean / running_var by the kernel.
GroupStats stats_from_running(const Tensor& running_mean, const Tensor& running_var, double eps,
                              int64_t repeat = 1);

// Geometry as an int list for ctx->saved_data, and back.
std::vector<int64_t> to_list(const NormGeometry& geo);
NormGeometry from_list(const std::vector<int64_t>& v);

// Checks an optional per-channel tensor (weight, bias, running stats): on the
// input's device, the input's dtype, `expected` elements; PyTorch's wording
// "running_mean should contain 3 elements not 4".
void check_param(const Tensor& t, const char* name, int64_t expected, const Tensor& input,
                 const char* op);
// And across them: a pair that one kernel reads with one element type (weight
// and bias; running_mean and running_var), when both are given, in one dtype:
// both float32 or both the input's next to a 16-bit input (PyTorch's
// mixed-type rule). A bfloat16 weight with a float32 bias passed check_param
// one by one, then the CUDA kernels (one parameter type, ops/cuda/norm_core.cu)
// refused the bias and the CPU's backward made grad_bias in the weight's dtype.
void check_param_dtypes(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name, const char* op);

}  // namespace minidl::norm

namespace minidl {

void register_norm_cpu_kernels();  // ops/cpu/norm_core.cpp

}  // namespace minidl
