// Elementwise unary ops and activations (floating dtypes).
#pragma once

#include <limits>
#include <optional>
#include <string>

#include "core/tensor.h"

namespace minidl {

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
// Either bound may be absent; PyTorch: "At least one of 'min' or 'max' must not be None".
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor gelu(const Tensor& x, const std::string& approximate = "none");  // "none" | "tanh"

}  // namespace minidl
