// Layer normalization (PyTorch's F.layer_norm): each row (the trailing
// normalized_shape dims, D values) has its own statistics, biased variance,
// the same in train and eval; the affine is per element of normalized_shape:
//   y = (x - mean_r) / sqrt(var_r + eps) * weight_d + bias_d
// Backward (sums over the row, g = dy * weight_d):
//   dx = invstd (g - sum g / D - xhat sum(g xhat) / D)
//   dweight_d = sum_rows dy xhat,  dbias_d = sum_rows dy
// Saves the input, the weight and the float64 per-row mean and invstd
// (ops/norm_core.h: A = 1, G = rows, K = D, S = 1, P = 1). Gradients are fresh
// tensors; the engine accumulates them.
#include "minidl/ops/layer_norm.h"

#include <string>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/norm_core.h"

namespace minidl {

namespace {

struct LayerNormName {
  static constexpr const char* kName = "LayerNorm";
};
using LayerNorm = norm::NormFunction<LayerNormName>;

void check_affine(const Tensor& t, const char* name, const Tensor& input, const Shape& normalized_shape) {
  if (!t.defined()) return;
  MINIDL_CHECK(t.shape() == normalized_shape, "Expected ", name,
               " to be of same shape as normalized_shape, but got ", name, " of shape ",
               shape_str(t.shape()), " and normalized_shape = ", shape_str(normalized_shape));
  norm::check_param(t, name, numel_of(normalized_shape), input, "layer_norm");
}

}  // namespace

Tensor layer_norm(const Tensor& input_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps) {
  const auto cast = amp::cast_args(amp::AmpOp::layer_norm, input_in, weight_in, bias_in);
  const Tensor &input = cast[0], &weight = cast[1], &bias = cast[2];
  MINIDL_CHECK(input.defined(), "layer_norm: the input tensor is undefined");
  MINIDL_CHECK(!normalized_shape.empty(),
               "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
               "element, but got normalized_shape = ", shape_str(normalized_shape));
  MINIDL_CHECK(is_floating(input.dtype()), "\"layer_norm\" not implemented for '", dtype_name(input.dtype()), "'");
  check_affine(weight, "weight", input, normalized_shape);
  check_affine(bias, "bias", input, normalized_shape);
  norm::check_param_dtypes(weight, "weight", bias, "bias", "layer_norm");
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  bool matches = input.dim() >= nd;
  for (int64_t i = 0; matches && i < nd; ++i)
    matches = input.size(input.dim() - nd + i) == normalized_shape[i];
  if (!matches) {
    std::string expected = "[*";
    for (int64_t s : normalized_shape) expected += ", " + std::to_string(s);
    MINIDL_FAIL("Given normalized_shape=", shape_str(normalized_shape), ", expected input with shape ",
                expected, "], but got input of size", shape_str(input.shape()));
  }
  const int64_t D = numel_of(normalized_shape);
  const int64_t rows = D == 0 ? 0 : input.numel() / D;  // D == 0: an empty input, an empty output
  const norm::NormGeometry geo{1, rows, D, 1, 1};
  norm::GroupStats stats;
  return LayerNorm::apply(input, weight, bias, geo, eps, true, &stats);
}

}  // namespace minidl
