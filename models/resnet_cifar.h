// ResNets for 32x32 inputs (CIFAR-10/100):
//
//   resnet18_cifar: the CIFAR variant of torchvision's ResNet-18 (as in
//     kuangliu/pytorch-cifar): 3x3 stem conv 3->64 with stride 1 and no
//     max-pool, four stages of 2 BasicBlocks, widths 64-128-256-512, strides
//     1-2-2-2, global average pool, linear 512->num_classes. 11,173,962
//     parameters with BatchNorm and 10 classes.
//   resnet20 / resnet56: the original CIFAR ResNets of He et al. 2015 (sec.
//     4.2): stem conv 3->16, three stages of n = 3 / 9 BasicBlocks, widths
//     16-32-64, strides 1-2-2, global average pool, linear 64->num_classes.
//     Shortcuts use option B (a 1x1 conv + norm where the shape changes), not
//     the paper's parameter-free option A (zero padding), so the counts are
//     272,474 / 855,770 rather than the paper's 0.27M / 0.85M option-A nets.
//
// Every conv has no bias; every norm comes from models::make_norm and is held
// in an nn::AnyModule registered under its name, so
// nn::convert_batch_norm_to_group_norm can swap it. Names follow torchvision /
// pytorch-cifar: "conv1", "bn1", "layer1.0.conv1", "layer1.0.bn1",
// "layer2.0.shortcut.0" (the 1x1 conv), "layer2.0.shortcut.1" (its norm), "fc".
// "bn" names are kept whatever the norm kind, as torchvision does when norm_layer changes.
// Init as torchvision: convs kaiming_normal_(mode="fan_out",
// nonlinearity="relu"), norm weight 1 and bias 0, the linear layer PyTorch's default.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "minidl/models/model_options.h"
#include "minidl/nn/module.h"
#include "minidl/nn/modules/container.h"
#include "minidl/nn/modules/conv.h"
#include "minidl/nn/modules/linear.h"

namespace minidl::models {

// conv3x3 -> norm -> relu -> conv3x3 -> norm, plus the shortcut, then relu.
class BasicBlockImpl : public nn::Module {
 public:
  BasicBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride, const std::string& norm);
  Tensor forward(const Tensor& input) override;

  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::AnyModule bn1, bn2;
  // Empty (nothing registered) when the shape is unchanged; otherwise
  // Sequential(1x1 conv, norm), whose forward follows a swapped norm.
  nn::Sequential shortcut{nullptr};
};
MINIDL_MODULE(BasicBlock);

// The stages and the width of each (see the header comment for the presets).
struct ResNetConfig {
  std::vector<int64_t> widths;  // per stage; the stem has widths[0] channels
  std::vector<int64_t> blocks;  // BasicBlocks per stage
  // Stride of each stage's first block: 1 for the first stage, 2 after.
};

class ResNetCifarImpl : public nn::Module {
 public:
  ResNetCifarImpl(const ResNetConfig& config, const ModelOptions& options);
  Tensor forward(const Tensor& input) override;

  nn::Conv2d conv1{nullptr};
  nn::AnyModule bn1;
  std::vector<nn::Sequential> layers;  // "layer1", "layer2", ...
  nn::Linear fc{nullptr};
};
MINIDL_MODULE(ResNetCifar);

ResNetCifar resnet18_cifar(const ModelOptions& options = {});
ResNetCifar resnet20(const ModelOptions& options = {});
ResNetCifar resnet56(const ModelOptions& options = {});

}  // namespace minidl::models
