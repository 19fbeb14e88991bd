// Pooling layers, as torch.nn: MaxPool2d/3d, AvgPool2d/3d, AdaptiveAvgPool2d/3d,
// AdaptiveMaxPool2d/3d (forward through ops/pooling.h), with PyTorch's options
// and defaults. As in libtorch, return_indices is a method, forward_with_indices.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <type_traits>

#include "minidl/nn/module.h"

namespace minidl::nn {

// Int2 for 2-D layers, Int3 for 3-D ones.
template <size_t D>
using IntN = std::conditional_t<D == 2, Int2, Int3>;

template <size_t D>
struct MaxPoolOptions {
  MaxPoolOptions(IntN<D> kernel_size) : kernel_size_(kernel_size) {}  // NOLINT: MaxPool2d(2)
  MINIDL_ARG(IntN<D>, kernel_size);
  MINIDL_ARG(std::optional<IntN<D>>, stride);  // PyTorch's None: the kernel size
  MINIDL_ARG(IntN<D>, padding) = 0;
  MINIDL_ARG(IntN<D>, dilation) = 1;
  MINIDL_ARG(bool, ceil_mode) = false;
};
using MaxPool2dOptions = MaxPoolOptions<2>;
using MaxPool3dOptions = MaxPoolOptions<3>;

template <size_t D>
struct AvgPoolOptions {
  AvgPoolOptions(IntN<D> kernel_size) : kernel_size_(kernel_size) {}  // NOLINT: AvgPool2d(2)
  MINIDL_ARG(IntN<D>, kernel_size);
  MINIDL_ARG(std::optional<IntN<D>>, stride);  // PyTorch's None: the kernel size
  MINIDL_ARG(IntN<D>, padding) = 0;
  MINIDL_ARG(bool, ceil_mode) = false;
  MINIDL_ARG(bool, count_include_pad) = true;
  MINIDL_ARG(std::optional<int64_t>, divisor_override);
};
using AvgPool2dOptions = AvgPoolOptions<2>;
using AvgPool3dOptions = AvgPoolOptions<3>;

template <size_t D>
struct AdaptivePoolOptions {
  AdaptivePoolOptions(IntN<D> output_size) : output_size_(output_size) {}  // NOLINT
  MINIDL_ARG(IntN<D>, output_size);
};
using AdaptiveAvgPool2dOptions = AdaptivePoolOptions<2>;
using AdaptiveAvgPool3dOptions = AdaptivePoolOptions<3>;
using AdaptiveMaxPool2dOptions = AdaptivePoolOptions<2>;
using AdaptiveMaxPool3dOptions = AdaptivePoolOptions<3>;

template <size_t D>
class MaxPoolImpl : public Module {
 public:
  MaxPoolImpl(const char* name, const MaxPoolOptions<D>& options);
  Tensor forward(const Tensor& input) override;
  // (output, indices), PyTorch's return_indices=True.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
  // "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False"
  std::string extra_repr() const override;
  MaxPoolOptions<D> options;
};

template <size_t D>
class AvgPoolImpl : public Module {
 public:
  AvgPoolImpl(const char* name, const AvgPoolOptions<D>& options);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "kernel_size=2, stride=2, padding=0"
  AvgPoolOptions<D> options;
};

template <size_t D, bool kMax>
class AdaptivePoolImpl : public Module {
 public:
  AdaptivePoolImpl(const char* name, const AdaptivePoolOptions<D>& options);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "output_size=(1, 1)"
  AdaptivePoolOptions<D> options;
};

// Name##Impl with PyTorch's constructors: from the options or from the first size.
#define MINIDL_POOL_LAYER(Name, Base, Options, First)                                         \
  class Name##Impl : public Base {                                                            \
   public:                                                                                    \
    explicit Name##Impl(const Options& options) : Base(#Name, options) {}                     \
    explicit Name##Impl(First first) : Name##Impl(Options(first)) {}                          \
  };                                                                                          \
  MINIDL_MODULE(Name)

MINIDL_POOL_LAYER(MaxPool2d, MaxPoolImpl<2>, MaxPool2dOptions, Int2);
MINIDL_POOL_LAYER(MaxPool3d, MaxPoolImpl<3>, MaxPool3dOptions, Int3);
MINIDL_POOL_LAYER(AvgPool2d, AvgPoolImpl<2>, AvgPool2dOptions, Int2);
MINIDL_POOL_LAYER(AvgPool3d, AvgPoolImpl<3>, AvgPool3dOptions, Int3);
using AdaptiveAvgPool2dBase = AdaptivePoolImpl<2, false>;
using AdaptiveAvgPool3dBase = AdaptivePoolImpl<3, false>;
using AdaptiveMaxPool2dBase = AdaptivePoolImpl<2, true>;
using AdaptiveMaxPool3dBase = AdaptivePoolImpl<3, true>;
MINIDL_POOL_LAYER(AdaptiveAvgPool2d, AdaptiveAvgPool2dBase, AdaptiveAvgPool2dOptions, Int2);
MINIDL_POOL_LAYER(AdaptiveAvgPool3d, AdaptiveAvgPool3dBase, AdaptiveAvgPool3dOptions, Int3);
MINIDL_POOL_LAYER(AdaptiveMaxPool2d, AdaptiveMaxPool2dBase, AdaptiveMaxPool2dOptions, Int2);
MINIDL_POOL_LAYER(AdaptiveMaxPool3d, AdaptiveMaxPool3dBase, AdaptiveMaxPool3dOptions, Int3);

#undef MINIDL_POOL_LAYER

}  // namespace minidl::nn
