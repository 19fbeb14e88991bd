// torch.nn.init in C++. The random fills draw doubles from the default
// Generator on the host and copy them into the tensor (any device, any
// floating dtype, any strides), so a seed gives the same weights everywhere.
#include "minidl/nn/init.h"

#include <cmath>
#include <vector>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/core/generator.h"

namespace minidl::nn::init {

namespace {

void check_defined(const Tensor& t, const char* fn) {
  MINIDL_CHECK(t.defined(), "nn::init::", fn, ": expected a defined tensor, got an undefined one");
}

void check_floating(const Tensor& t, const char* fn) {
  check_defined(t, fn);
  MINIDL_CHECK(is_floating(t.dtype()), "nn::init::", fn, ": expected a floating point tensor, got ",
               dtype_name(t.dtype()));
}

// Copies host values (row-major) into `t` without recording history.
Tensor fill_from(const Tensor& t, const std::vector<double>& values) {
  NoGradGuard no_grad;
  Tensor dst = t;
  dst.copy_(tensor(values, t.shape(), kFloat64));
  return t;
}

template <class Draw>
Tensor fill_random(const Tensor& t, Draw draw) {
  std::vector<double> values(static_cast<size_t>(t.numel()));
  Generator& gen = default_generator();
  for (double& v : values) v = draw(gen);
  return fill_from(t, values);
}

int64_t correct_fan(const Tensor& t, const std::string& mode) {
  MINIDL_CHECK(mode == "fan_in" || mode == "fan_out", "Mode ", mode,
               " not supported, please use one of ['fan_in', 'fan_out']");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return mode == "fan_in" ? fan_in : fan_out;
}

}  // namespace

double calculate_gain(const std::string& nonlinearity, std::optional<double> param) {
  for (const char* linear : {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                             "conv_transpose2d", "conv_transpose3d", "sigmoid"})
    if (nonlinearity == linear) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 3.0 / 4.0;
  MINIDL_FAIL("Unsupported nonlinearity ", nonlinearity);
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
  check_defined(tensor, "calculate_fan_in_and_fan_out");
  MINIDL_CHECK(tensor.dim() >= 2,
               "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions "
               "(got a tensor of size ", shape_str(tensor.shape()), ")");
  int64_t receptive_field = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive_field *= tensor.size(d);
  return {tensor.size(1) * receptive_field, tensor.size(0) * receptive_field};
}

Tensor uniform_(const Tensor& tensor, double a, double b) {
  check_floating(tensor, "uniform_");
  MINIDL_CHECK(a <= b, "uniform_ expects to return a [from, to) range, but found from=", a, " > to=", b);
  return fill_random(tensor, [a, b](Generator& g) { return a + (b - a) * g.uniform(); });
}

Tensor normal_(const Tensor& tensor, double mean, double std) {
  check_floating(tensor, "normal_");
  MINIDL_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  return fill_random(tensor, [mean, std](Generator& g) { return mean + std * g.normal(); });
}

Tensor constant_(const Tensor& tensor, double value) {
  check_defined(tensor, "constant_");
  NoGradGuard no_grad;
  Tensor dst = tensor;
  dst.fill_(value);
  return tensor;
}

Tensor zeros_(const Tensor& tensor) { return constant_(tensor, 0.0); }
Tensor ones_(const Tensor& tensor) { return constant_(tensor, 1.0); }

Tensor kaiming_uniform_(const Tensor& tensor, double a, const std::string& mode,
                        const std::string& nonlinearity) {
  check_floating(tensor, "kaiming_uniform_");
  if (tensor.numel() == 0) return tensor;  // PyTorch: "Initializing zero-element tensors is a no-op"
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(correct_fan(tensor, mode)));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(tensor, -bound, bound);
}

Tensor kaiming_normal_(const Tensor& tensor, double a, const std::string& mode,
                       const std::string& nonlinearity) {
  check_floating(tensor, "kaiming_normal_");
  if (tensor.numel() == 0) return tensor;
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(correct_fan(tensor, mode)));
  return normal_(tensor, 0.0, std);
}

Tensor xavier_uniform_(const Tensor& tensor, double gain) {
  check_floating(tensor, "xavier_uniform_");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(tensor, -bound, bound);
}

Tensor xavier_normal_(const Tensor& tensor, double gain) {
  check_floating(tensor, "xavier_normal_");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  return normal_(tensor, 0.0, std);
}

}  // namespace minidl::nn::init
