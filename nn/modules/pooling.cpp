// Pooling layers: thin modules over ops/pooling.h; the ops check the input.
// One template per kind serves the 2-D and 3-D layers.
#include "minidl/nn/modules/pooling.h"

#include "minidl/core/check.h"
#include "minidl/ops/pooling.h"

namespace minidl::nn {

namespace {

std::string tuple_str(const Int2& v) { return v.pair_str(); }
std::string tuple_str(const Int3& v) { return v.tuple_str(); }

// The construction-time checks of the window layers (the ops repeat them per call).
template <size_t D>
void check_pool_sizes(const std::string& layer, const IntN<D>& kernel, const std::optional<IntN<D>>& stride,
                      const IntN<D>& padding, const IntN<D>& dilation) {
  for (size_t i = 0; i < D; ++i) {
    MINIDL_CHECK(kernel[i] > 0, layer, ": kernel_size must be greater than zero, but got ", tuple_str(kernel));
    MINIDL_CHECK(!stride || (*stride)[i] > 0, layer, ": stride must be greater than zero, but got ",
                 tuple_str(*stride));
    MINIDL_CHECK(dilation[i] > 0, layer, ": dilation must be greater than zero, but got ", tuple_str(dilation));
    MINIDL_CHECK(padding[i] >= 0 && padding[i] <= kernel[i] / 2, layer,
                 ": pad should be at most half of effective kernel size, but got pad=", tuple_str(padding),
                 " and kernel_size=", tuple_str(kernel));
  }
}

}  // namespace

template <size_t D>
MaxPoolImpl<D>::MaxPoolImpl(const char* name, const MaxPoolOptions<D>& options_) : Module(name), options(options_) {
  check_pool_sizes<D>(name, options.kernel_size(), options.stride(), options.padding(), options.dilation());
}

template <size_t D>
std::tuple<Tensor, Tensor> MaxPoolImpl<D>::forward_with_indices(const Tensor& input) {
  const auto& o = options;
  if constexpr (D == 2)
    return max_pool2d_with_indices(input, o.kernel_size(), o.stride().value_or(o.kernel_size()), o.padding(),
                                   o.dilation(), o.ceil_mode());
  else
    return max_pool3d_with_indices(input, o.kernel_size(), o.stride().value_or(o.kernel_size()), o.padding(),
                                   o.dilation(), o.ceil_mode());
}

template <size_t D>
Tensor MaxPoolImpl<D>::forward(const Tensor& input) {
  const auto& o = options;
  if constexpr (D == 2)
    return max_pool2d(input, o.kernel_size(), o.stride().value_or(o.kernel_size()), o.padding(), o.dilation(),
                      o.ceil_mode());
  else
    return max_pool3d(input, o.kernel_size(), o.stride().value_or(o.kernel_size()), o.padding(), o.dilation(),
                      o.ceil_mode());
}

template <size_t D>
std::string MaxPoolImpl<D>::extra_repr() const {
  std::string s = "kernel_size=";
  s.append(options.kernel_size().str()).append(", stride=").append(options.stride().value_or(options.kernel_size()).str());
  s.append(", padding=").append(options.padding().str()).append(", dilation=").append(options.dilation().str());
  return s.append(", ceil_mode=").append(repr_bool(options.ceil_mode()));
}

template <size_t D>
AvgPoolImpl<D>::AvgPoolImpl(const char* name, const AvgPoolOptions<D>& options_) : Module(name), options(options_) {
  check_pool_sizes<D>(name, options.kernel_size(), options.stride(), options.padding(), IntN<D>(1));
  MINIDL_CHECK(!options.divisor_override() || *options.divisor_override() != 0, name,
               ": divisor must be not zero");
}

template <size_t D>
Tensor AvgPoolImpl<D>::forward(const Tensor& input) {
  const auto& o = options;
  if constexpr (D == 2)
    return avg_pool2d(input, o.kernel_size(), o.stride().value_or(o.kernel_size()), o.padding(),
                      o.ceil_mode(), o.count_include_pad(), o.divisor_override());
  else
    return avg_pool3d(input, o.kernel_size(), o.stride().value_or(o.kernel_size()), o.padding(),
                      o.ceil_mode(), o.count_include_pad(), o.divisor_override());
}

// PyTorch's AvgPool*d repr leaves out ceil_mode, count_include_pad and divisor_override.
template <size_t D>
std::string AvgPoolImpl<D>::extra_repr() const {
  std::string s = "kernel_size=";
  s.append(options.kernel_size().str()).append(", stride=").append(options.stride().value_or(options.kernel_size()).str());
  return s.append(", padding=").append(options.padding().str());
}

template <size_t D, bool kMax>
AdaptivePoolImpl<D, kMax>::AdaptivePoolImpl(const char* name, const AdaptivePoolOptions<D>& options_)
    : Module(name), options(options_) {
  for (size_t i = 0; i < D; ++i)
    MINIDL_CHECK(options.output_size()[i] >= 0, name, ": output_size must be non-negative, got ",
                 tuple_str(options.output_size()));
}

template <size_t D, bool kMax>
Tensor AdaptivePoolImpl<D, kMax>::forward(const Tensor& input) {
  if constexpr (D == 2)
    return kMax ? adaptive_max_pool2d(input, options.output_size()) : adaptive_avg_pool2d(input, options.output_size());
  else
    return kMax ? adaptive_max_pool3d(input, options.output_size()) : adaptive_avg_pool3d(input, options.output_size());
}

template <size_t D, bool kMax>
std::string AdaptivePoolImpl<D, kMax>::extra_repr() const {
  return "output_size=" + options.output_size().str();
}

template class MaxPoolImpl<2>;
template class MaxPoolImpl<3>;
template class AvgPoolImpl<2>;
template class AvgPoolImpl<3>;
template class AdaptivePoolImpl<2, false>;
template class AdaptivePoolImpl<3, false>;
template class AdaptivePoolImpl<2, true>;
template class AdaptivePoolImpl<3, true>;

}  // namespace minidl::nn
