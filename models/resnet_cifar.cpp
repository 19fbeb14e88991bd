// CIFAR ResNets (ResNet-18 variant, ResNet-20, ResNet-56). See models/resnet_cifar.h.
#include "minidl/models/resnet_cifar.h"

#include <cmath>

#include "minidl/core/check.h"
#include "minidl/models/norm_factory.h"
#include "minidl/nn/init.h"
#include "minidl/ops/ops.h"

namespace minidl::models {

namespace {

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// torchvision's ResNet init for the convs (norm layers already start at weight 1, bias 0).
void init_conv(nn::Conv2d& conv) { nn::init::kaiming_normal_(conv->weight, 0.0, "fan_out", "relu"); }

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride, const std::string& norm)
    : Module("BasicBlock") {
  conv1 = register_module("conv1", conv3x3(in_channels, out_channels, stride));
  bn1 = register_module("bn1", make_norm(norm, out_channels));
  conv2 = register_module("conv2", conv3x3(out_channels, out_channels, 1));
  bn2 = register_module("bn2", make_norm(norm, out_channels));
  init_conv(conv1);
  init_conv(conv2);
  if (stride != 1 || in_channels != out_channels) {  // option B: projection shortcut
    nn::Conv2d proj(nn::Conv2dOptions(in_channels, out_channels, 1).stride(stride).bias(false));
    init_conv(proj);
    shortcut = register_module("shortcut", nn::Sequential(proj, make_norm(norm, out_channels).ptr()));
  }
}

Tensor BasicBlockImpl::forward(const Tensor& input) {
  Tensor out = relu(bn1(conv1(input)));
  out = bn2(conv2(out));
  return relu(out + (shortcut ? shortcut(input) : input));
}

ResNetCifarImpl::ResNetCifarImpl(const ResNetConfig& config, const ModelOptions& options) : Module("ResNetCifar") {
  MINIDL_CHECK(!config.widths.empty() && config.widths.size() == config.blocks.size(),
               "ResNetCifar: expected one width and one block count per stage, got ", config.widths.size(),
               " widths and ", config.blocks.size(), " block counts");
  MINIDL_CHECK(options.in_channels() > 0, "ResNetCifar: expected in_channels > 0, got ", options.in_channels());
  MINIDL_CHECK(options.num_classes() > 0, "ResNetCifar: expected num_classes > 0, got ", options.num_classes());
  const std::string norm = options.norm_or("batchnorm");
  int64_t channels = scaled_width(config.widths[0], options.width());
  conv1 = register_module("conv1", conv3x3(options.in_channels(), channels, 1));
  init_conv(conv1);
  bn1 = register_module("bn1", make_norm(norm, channels));
  for (size_t s = 0; s < config.widths.size(); ++s) {
    MINIDL_CHECK(config.blocks[s] > 0, "ResNetCifar: stage ", s + 1, " needs at least one block, got ",
                 config.blocks[s]);
    const int64_t out = scaled_width(config.widths[s], options.width());
    nn::Sequential stage;
    for (int64_t b = 0; b < config.blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      stage->push_back(BasicBlock(channels, out, stride, norm));
      channels = out;
    }
    layers.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  fc = register_module("fc", nn::Linear(channels, options.num_classes()));
}

Tensor ResNetCifarImpl::forward(const Tensor& input) {
  MINIDL_CHECK(input.defined() && input.dim() == 4,
               "ResNetCifar: expected a 4D (N, C, H, W) input, got ",
               input.defined() ? std::to_string(input.dim()) + "D" : std::string("an undefined tensor"));
  Tensor x = relu(bn1(conv1(input)));
  for (nn::Sequential& stage : layers) x = stage(x);
  return fc(adaptive_avg_pool2d(x, {1, 1}).flatten(1));
}

ResNetCifar resnet18_cifar(const ModelOptions& options) {
  return ResNetCifar(ResNetConfig{{64, 128, 256, 512}, {2, 2, 2, 2}}, options);
}
ResNetCifar resnet20(const ModelOptions& options) { return ResNetCifar(ResNetConfig{{16, 32, 64}, {3, 3, 3}}, options); }
ResNetCifar resnet56(const ModelOptions& options) { return ResNetCifar(ResNetConfig{{16, 32, 64}, {9, 9, 9}}, options); }

}  // namespace minidl::models
