// Parameter initialization, as torch.nn.init: every function fills `tensor`
// in place (no autograd history, whatever the grad mode), draws from
// minidl::default_generator() in row-major order, and returns the same handle.
//
// Fans follow PyTorch's _calculate_fan_in_and_fan_out: for a weight of shape
// (out, in, *kernel), fan_in = in * prod(kernel) and fan_out = out * prod(kernel);
// fewer than 2 dims is an error.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "minidl/core/tensor.h"

namespace minidl::nn::init {

// Recommended gain for a nonlinearity: "linear", "conv1d", "conv2d", "conv3d",
// "conv_transpose1d/2d/3d", "sigmoid" -> 1; "tanh" -> 5/3; "relu" -> sqrt(2);
// "leaky_relu" -> sqrt(2 / (1 + slope^2)) with slope = param or 0.01; "selu" -> 3/4.
double calculate_gain(const std::string& nonlinearity, std::optional<double> param = std::nullopt);

// {fan_in, fan_out}.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);

Tensor uniform_(const Tensor& tensor, double a = 0.0, double b = 1.0);    // U[a, b)
Tensor normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0);  // N(mean, std^2)
Tensor constant_(const Tensor& tensor, double value);
Tensor zeros_(const Tensor& tensor);
Tensor ones_(const Tensor& tensor);

// std = gain / sqrt(fan) with gain = calculate_gain(nonlinearity, a) and fan
// picked by mode ("fan_in" or "fan_out"); uniform draws U(-sqrt(3) std, sqrt(3) std).
Tensor kaiming_uniform_(const Tensor& tensor, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu");
Tensor kaiming_normal_(const Tensor& tensor, double a = 0.0, const std::string& mode = "fan_in",
                       const std::string& nonlinearity = "leaky_relu");

// std = gain * sqrt(2 / (fan_in + fan_out)); uniform draws U(-sqrt(3) std, sqrt(3) std).
Tensor xavier_uniform_(const Tensor& tensor, double gain = 1.0);
Tensor xavier_normal_(const Tensor& tensor, double gain = 1.0);

}  // namespace minidl::nn::init
