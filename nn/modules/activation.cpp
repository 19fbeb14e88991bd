// Activation layers: thin modules over the unary ops.
#include "minidl/nn/modules/activation.h"

#include "minidl/core/check.h"
#include "minidl/ops/unary.h"

namespace minidl::nn {

Tensor ReLUImpl::forward(const Tensor& input) { return relu(input); }

LeakyReLUImpl::LeakyReLUImpl(const LeakyReLUOptions& options_) : Module("LeakyReLU"), options(options_) {}
Tensor LeakyReLUImpl::forward(const Tensor& input) { return leaky_relu(input, options.negative_slope()); }
std::string LeakyReLUImpl::extra_repr() const { return "negative_slope=" + repr_float(options.negative_slope()); }

GELUImpl::GELUImpl(const GELUOptions& options_) : Module("GELU"), options(options_) {
  MINIDL_CHECK(options.approximate() == "none" || options.approximate() == "tanh",
               "approximate argument must be either none or tanh.");
}
Tensor GELUImpl::forward(const Tensor& input) { return gelu(input, options.approximate()); }
std::string GELUImpl::extra_repr() const { return "approximate='" + options.approximate() + "'"; }

Tensor SigmoidImpl::forward(const Tensor& input) { return sigmoid(input); }
Tensor TanhImpl::forward(const Tensor& input) { return tanh(input); }

}  // namespace minidl::nn
