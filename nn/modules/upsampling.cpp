// Upsample: a module over interpolate; the op checks sizes, modes and input.
#include "minidl/nn/modules/upsampling.h"

#include "minidl/ops/interpolate.h"

namespace minidl::nn {

UpsampleImpl::UpsampleImpl(const UpsampleOptions& options_) : Module("Upsample"), options(options_) {}

Tensor UpsampleImpl::forward(const Tensor& input) {
  return interpolate(input, {.size = options.size(),
                             .scale_factor = options.scale_factor(),
                             .mode = options.mode(),
                             .align_corners = options.align_corners(),
                             .recompute_scale_factor = options.recompute_scale_factor()});
}

// As PyTorch prints it: one value bare, several as a tuple; floats as Python does.
std::string UpsampleImpl::extra_repr() const {
  std::string info;
  auto list = [&](const auto& values, auto fmt) {
    if (values.size() == 1) return fmt(values[0]);
    std::string s = "(";
    for (size_t i = 0; i < values.size(); ++i) {
      if (i) s.append(", ");
      s.append(fmt(values[i]));
    }
    return s + ")";
  };
  if (!options.scale_factor().empty())
    info = "scale_factor=" + list(options.scale_factor(), [](double v) { return repr_float(v); });
  else if (!options.size().empty())
    info = "size=" + list(options.size(), [](int64_t v) { return std::to_string(v); });
  else
    info = "size=None";  // neither given: forward refuses, as PyTorch's
  return info + ", mode='" + options.mode() + "'";
}

}  // namespace minidl::nn
