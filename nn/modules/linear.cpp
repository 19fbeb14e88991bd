// nn::Linear: registers weight and bias, PyTorch's default init, forward
// through minidl::linear (ops/matmul.h).
#include "minidl/nn/modules/linear.h"

#include <cmath>

#include "minidl/core/check.h"
#include "minidl/nn/init.h"
#include "minidl/ops/matmul.h"

namespace minidl::nn {

LinearImpl::LinearImpl(const LinearOptions& options_) : Module("Linear"), options(options_) {
  MINIDL_CHECK(options.in_features() >= 0 && options.out_features() >= 0,
               "Linear: expected non-negative in_features and out_features, got in_features=",
               options.in_features(), ", out_features=", options.out_features());
  weight = register_parameter("weight", empty({options.out_features(), options.in_features()}));
  bias = register_parameter("bias", options.bias() ? empty({options.out_features()}) : Tensor());
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = options.in_features();
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& input) { return linear(input, weight, bias); }

std::string LinearImpl::extra_repr() const {
  return "in_features=" + std::to_string(options.in_features()) +
         ", out_features=" + std::to_string(options.out_features()) + ", bias=" + repr_bool(bias.defined());
}

}  // namespace minidl::nn
