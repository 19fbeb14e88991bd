// nn::Dropout: checks p, then minidl::dropout with this module's training flag.
#include "minidl/nn/modules/dropout.h"

#include "minidl/core/check.h"
#include "minidl/ops/dropout.h"

namespace minidl::nn {

DropoutImpl::DropoutImpl(const DropoutOptions& options_) : Module("Dropout"), options(options_) {
  MINIDL_CHECK(options.p() >= 0.0 && options.p() <= 1.0,
               "dropout probability has to be between 0 and 1, but got ", options.p());
}

Tensor DropoutImpl::forward(const Tensor& input) { return dropout(input, options.p(), is_training()); }

std::string DropoutImpl::extra_repr() const { return "p=" + repr_float(options.p()) + ", inplace=False"; }

}  // namespace minidl::nn
