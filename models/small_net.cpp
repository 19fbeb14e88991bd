// SmallNet. See models/small_net.h.
#include "minidl/models/small_net.h"

#include <string>

#include "minidl/core/check.h"
#include "minidl/models/norm_factory.h"
#include "minidl/ops/ops.h"

namespace minidl::models {

SmallNetImpl::SmallNetImpl(const ModelOptions& options) : Module("SmallNet") {
  MINIDL_CHECK(options.in_channels() > 0, "SmallNet: expected in_channels > 0, got ", options.in_channels());
  MINIDL_CHECK(options.num_classes() > 0, "SmallNet: expected num_classes > 0, got ", options.num_classes());
  const std::string norm = options.norm_or("batchnorm");
  const std::array<int64_t, 4> base{64, 128, 256, 512};
  int64_t in = options.in_channels();
  for (size_t i = 0; i < base.size(); ++i) {
    const int64_t out = scaled_width(base[i], options.width());
    const std::string n = std::to_string(i + 1);
    convs[i] = register_module("conv" + n, nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
    norms[i] = register_module("bn" + n, make_norm(norm, out));
    in = out;
  }
  fc = register_module("fc", nn::Linear(in, options.num_classes()));
}

Tensor SmallNetImpl::forward(const Tensor& input) {
  MINIDL_CHECK(input.defined() && input.dim() == 4, "SmallNet: expected a 4D (N, C, H, W) input, got ",
               input.defined() ? std::to_string(input.dim()) + "D" : std::string("an undefined tensor"));
  Tensor x = relu(norms[0](convs[0](input)));
  for (size_t i = 1; i < convs.size(); ++i) x = relu(norms[i](max_pool2d(convs[i](x), {2, 2})));
  return fc(adaptive_max_pool2d(x, {1, 1}).flatten(1));
}

}  // namespace minidl::models
