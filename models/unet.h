// U-Net for segmentation, 2-D (Ronneberger et al. 2015) and 3-D (Cicek et
// al. 2016), in the common "same padding" form, so the output has the input's
// spatial size:
//
//   models::UNet3d net(1, 1, 16, "batchnorm");   // in_channels, classes, base_width, norm
//   Tensor logits = net(x);                      // x (N, 1, D, H, W) -> (N, 1, D, H, W)
//
// With L levels (default 4) and width b = base_width, level l has 2^l * b channels:
//   encoders.l  [max-pool 2, for l > 0] conv3 -> norm -> ReLU -> conv3 -> norm -> ReLU
//   ups.l       2x up-sampling from level l+1 (2^(l+1) b -> 2^l b channels): either
//               "transpose": ConvTranspose 2x2(x2) stride 2 (ups.l.conv), or
//               "interpolate": bilinear/trilinear resize x2 (align_corners false),
//               then a 1x1(x1) conv (ups.l.conv)
//   decoders.l  cat([skip of encoder l, ups.l output], channels) -> double conv as
//               the encoders (2^(l+1) b -> 2^l b channels)
//   head        1x1(x1) conv b -> classes: logits (sigmoid for one class, softmax for several)
// The convs of the double convs have no bias (a norm follows) unless norm is
// "none". Every spatial size must be divisible by 2^(L-1).
//
// The norm is chosen by name as in the CIFAR models (models/norm_factory.h):
// batchnorm (BatchNorm2d/3d), groupnorm, layernorm, instancenorm, none. For
// SyncBatchNorm build with "batchnorm" and convert with
// nn::convert_sync_batch_norm (dist/sync_batch_norm.h), as PyTorch does; every
// norm is an nn::AnyModule inside an nn::Sequential, so the conversion
// reaches it. Parameter names match the PyTorch module of
// scripts/unet_reference.py (e.g. "encoders.0.0.weight", "encoders.0.1.weight"
// for the first norm, "ups.2.conv.weight", "head.weight"), so weights move both
// ways through safetensors. Layers keep PyTorch's default init.
// UNet3d(1, 1, 16) with BatchNorm has 1,401,265 parameters (transpose up-sampling;
// 1,326,001 with "interpolate"); UNet2d(1, 1, 16) 482,449.
#pragma once

#include <cstdint>
#include <string>

#include "minidl/nn/module.h"
#include "minidl/nn/modules/container.h"

namespace minidl::models {

struct UNetOptions {
  MINIDL_ARG(int64_t, in_channels) = 1;
  MINIDL_ARG(int64_t, classes) = 1;
  MINIDL_ARG(int64_t, base_width) = 16;
  MINIDL_ARG(std::string, norm) = "batchnorm";
  MINIDL_ARG(std::string, upsample) = "transpose";  // or "interpolate"
  MINIDL_ARG(int64_t, levels) = 4;                  // resolutions; levels - 1 poolings
};

// The up-sampling step of a decoder level (see the header comment).
class UNetUpImpl : public nn::Module {
 public:
  UNetUpImpl(int64_t spatial_dims, int64_t in_channels, int64_t out_channels, const std::string& mode);
  Tensor forward(const Tensor& input) override;

  int64_t spatial_dims;
  std::string mode;
  nn::AnyModule conv;
};
MINIDL_MODULE(UNetUp);

// Shared by UNet2d and UNet3d; spatial_dims is 2 or 3.
class UNetImpl : public nn::Module {
 public:
  UNetImpl(const std::string& name, int64_t spatial_dims, const UNetOptions& options);
  Tensor forward(const Tensor& input) override;

  int64_t spatial_dims;
  UNetOptions options;
  nn::ModuleList encoders{nullptr}, ups{nullptr}, decoders{nullptr};
  nn::AnyModule head;
};

class UNet2dImpl : public UNetImpl {
 public:
  explicit UNet2dImpl(const UNetOptions& options) : UNetImpl("UNet2d", 2, options) {}
  UNet2dImpl(int64_t in_channels, int64_t classes, int64_t base_width = 16, const std::string& norm = "batchnorm")
      : UNet2dImpl(UNetOptions().in_channels(in_channels).classes(classes).base_width(base_width).norm(norm)) {}
};
MINIDL_MODULE(UNet2d);

class UNet3dImpl : public UNetImpl {
 public:
  explicit UNet3dImpl(const UNetOptions& options) : UNetImpl("UNet3d", 3, options) {}
  UNet3dImpl(int64_t in_channels, int64_t classes, int64_t base_width = 16, const std::string& norm = "batchnorm")
      : UNet3dImpl(UNetOptions().in_channels(in_channels).classes(classes).base_width(base_width).norm(norm)) {}
};
MINIDL_MODULE(UNet3d);

}  // namespace minidl::models
