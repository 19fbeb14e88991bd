// Group normalization over (N, C, *) (PyTorch's F.group_norm): the C channels
// form num_groups groups of C/G consecutive channels; each (n, group) has its
// own statistics over its C/G * prod(*) values, biased variance, and the
// affine is per channel:
//   y = (x - mean_ng) / sqrt(var_ng + eps) * weight_c + bias_c
// Backward (sums over the (n, group) values, g = dy * weight_c):
//   dx = invstd (g - sum g / M - xhat sum(g xhat) / M)
//   dweight_c = sum_n sum dy xhat,  dbias_c = sum_n sum dy
// Saves the input, the weight and the float64 per-(n, group) mean and invstd
// (ops/norm_core.h: A = 1, G = N*groups, K = C/groups, S = prod(*), P = groups).
// Gradients are fresh tensors; the engine accumulates them.
#include "minidl/ops/group_norm.h"

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/norm_core.h"

namespace minidl {

namespace {

struct GroupNormName {
  static constexpr const char* kName = "GroupNorm";
};
using GroupNorm = norm::NormFunction<GroupNormName>;

void check_affine(const Tensor& t, const char* name, const Tensor& input, int64_t C) {
  if (!t.defined()) return;
  MINIDL_CHECK(t.dim() == 1 && t.numel() == C, "Expected ", name,
               " to be a vector of size equal to the number of channels in input, but got ", name,
               " of shape ", shape_str(t.shape()), " and input of shape ", shape_str(input.shape()));
  norm::check_param(t, name, C, input, "group_norm");
}

}  // namespace

Tensor group_norm(const Tensor& input_in, int64_t num_groups, const Tensor& weight_in,
                  const Tensor& bias_in,
                  double eps) {
  const auto cast = amp::cast_args(amp::AmpOp::group_norm, input_in, weight_in, bias_in);
  const Tensor &input = cast[0], &weight = cast[1], &bias = cast[2];
  MINIDL_CHECK(input.defined(), "group_norm: the input tensor is undefined");
  MINIDL_CHECK(input.dim() >= 2, "Expected at least 2 dimensions for input tensor but received ", input.dim());
  MINIDL_CHECK(is_floating(input.dtype()), "\"group_norm\" not implemented for '", dtype_name(input.dtype()), "'");
  MINIDL_CHECK(num_groups > 0, "group_norm: expected num_groups to be positive, got ", num_groups);
  const int64_t N = input.size(0), C = input.size(1);
  MINIDL_CHECK(C % num_groups == 0,
               "Expected number of channels in input to be divisible by num_groups, but got input of shape ",
               shape_str(input.shape()), " and num_groups=", num_groups);
  check_affine(weight, "weight", input, C);
  check_affine(bias, "bias", input, C);
  norm::check_param_dtypes(weight, "weight", bias, "bias", "group_norm");
  int64_t spatial = 1;
  for (int64_t d = 2; d < input.dim(); ++d) spatial *= input.size(d);

  const norm::NormGeometry geo{1, N * num_groups, C / num_groups, spatial, num_groups};
  norm::GroupStats stats;
  return GroupNorm::apply(input, weight, bias, geo, eps, true, &stats);
}

}  // namespace minidl
