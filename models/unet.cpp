// UNet2d / UNet3d. See models/unet.h.
#include "minidl/models/unet.h"

#include "minidl/core/check.h"
#include "minidl/models/norm_factory.h"
#include "minidl/nn/modules/activation.h"
#include "minidl/nn/modules/conv.h"
#include "minidl/nn/modules/conv_transpose.h"
#include "minidl/ops/ops.h"

namespace minidl::models {

namespace {

// A k x k (x k) conv with padding k / 2 (same size), 2-D or 3-D.
std::shared_ptr<nn::Module> conv(int64_t dims, int64_t in, int64_t out, int64_t k, bool bias) {
  if (dims == 2) return nn::Conv2d(nn::Conv2dOptions(in, out, k).padding(k / 2).bias(bias)).ptr();
  return nn::Conv3d(nn::Conv3dOptions(in, out, k).padding(k / 2).bias(bias)).ptr();
}

// The 2^dims transposed conv with stride 2 that doubles each spatial size.
std::shared_ptr<nn::Module> up_conv(int64_t dims, int64_t in, int64_t out) {
  if (dims == 2) return nn::ConvTranspose2d(nn::ConvTranspose2dOptions(in, out, 2).stride(2)).ptr();
  return nn::ConvTranspose3d(nn::ConvTranspose3dOptions(in, out, 2).stride(2)).ptr();
}

// conv3 -> norm -> ReLU, twice, as one Sequential (names 0..5, as PyTorch's nn.Sequential).
nn::Sequential double_conv(int64_t dims, int64_t in, int64_t out, const std::string& norm) {
  const bool bias = norm == "none";  // a norm's shift makes a conv bias redundant
  nn::Sequential s;
  s->push_back(conv(dims, in, out, 3, bias));
  s->push_back(make_norm(norm, out, dims).ptr());
  s->push_back(nn::ReLU());
  s->push_back(conv(dims, out, out, 3, bias));
  s->push_back(make_norm(norm, out, dims).ptr());
  s->push_back(nn::ReLU());
  return s;
}

}  // namespace

UNetUpImpl::UNetUpImpl(int64_t spatial_dims_, int64_t in_channels, int64_t out_channels, const std::string& mode_)
    : Module("UNetUp"), spatial_dims(spatial_dims_), mode(mode_) {
  MINIDL_CHECK(mode == "transpose" || mode == "interpolate", "UNet: unknown upsample mode '", mode,
               "'; expected transpose or interpolate");
  std::shared_ptr<nn::Module> m = mode == "interpolate"
                                      ? models::conv(spatial_dims, in_channels, out_channels, 1, true)
                                      : up_conv(spatial_dims, in_channels, out_channels);
  conv = register_module("conv", nn::AnyModule(m));
}

Tensor UNetUpImpl::forward(const Tensor& input) {
  if (mode == "transpose") return conv(input);
  InterpolateOptions o;
  o.scale_factor = {2.0};
  o.mode = spatial_dims == 2 ? "bilinear" : "trilinear";
  o.align_corners = false;
  return conv(interpolate(input, o));
}

UNetImpl::UNetImpl(const std::string& name, int64_t spatial_dims_, const UNetOptions& options_)
    : Module(name), spatial_dims(spatial_dims_), options(options_) {
  const UNetOptions& o = options;
  MINIDL_CHECK(o.in_channels() > 0, name, ": expected in_channels > 0, got ", o.in_channels());
  MINIDL_CHECK(o.classes() > 0, name, ": expected classes > 0, got ", o.classes());
  MINIDL_CHECK(o.base_width() > 0, name, ": expected base_width > 0, got ", o.base_width());
  MINIDL_CHECK(o.levels() >= 1 && o.levels() <= 8, name, ": expected levels between 1 and 8, got ", o.levels());
  MINIDL_CHECK(o.upsample() == "transpose" || o.upsample() == "interpolate", name, ": unknown upsample mode '",
               o.upsample(), "'; expected transpose or interpolate");
  nn::ModuleList enc, up, dec;
  int64_t in = o.in_channels();
  for (int64_t l = 0; l < o.levels(); ++l) {
    const int64_t width = o.base_width() << l;
    enc->push_back(double_conv(spatial_dims, in, width, o.norm()));
    in = width;
  }
  for (int64_t l = 0; l + 1 < o.levels(); ++l) {
    const int64_t width = o.base_width() << l;
    up->push_back(UNetUp(spatial_dims, 2 * width, width, o.upsample()));
    dec->push_back(double_conv(spatial_dims, 2 * width, width, o.norm()));
  }
  encoders = register_module("encoders", enc);
  ups = register_module("ups", up);
  decoders = register_module("decoders", dec);
  head = register_module("head", nn::AnyModule(conv(spatial_dims, o.base_width(), o.classes(), 1, true)));
}

Tensor UNetImpl::forward(const Tensor& input) {
  MINIDL_CHECK(input.defined() && input.dim() == spatial_dims + 2, name(), ": expected a ", spatial_dims + 2,
               "D (N, C, ", spatial_dims == 2 ? "H, W" : "D, H, W", ") input, got ",
               input.defined() ? std::to_string(input.dim()) + "D" : std::string("an undefined tensor"));
  MINIDL_CHECK(input.size(1) == options.in_channels(), name(), ": expected input with ", options.in_channels(),
               " channels, got input size ", shape_str(input.shape()));
  const int64_t multiple = int64_t{1} << (options.levels() - 1);
  for (int64_t d = 2; d < input.dim(); ++d) {
    MINIDL_CHECK(input.size(d) > 0, name(), ": expected every spatial size > 0, got input size ",
                 shape_str(input.shape()));
    MINIDL_CHECK(input.size(d) % multiple == 0, name(), ": expected every spatial size divisible by ", multiple, " (",
                 options.levels() - 1, " poolings by 2), got input size ", shape_str(input.shape()));
  }
  std::vector<Tensor> skips;
  Tensor x = input;
  for (int64_t l = 0; l < options.levels(); ++l) {
    if (l > 0)
      x = spatial_dims == 2 ? max_pool2d(x, {2, 2}) : max_pool3d(x, {2, 2, 2});
    x = encoders->ptr(l)->forward(x);
    skips.push_back(x);
  }
  for (int64_t l = options.levels() - 2; l >= 0; --l)
    x = decoders->ptr(l)->forward(cat({skips[l], ups->ptr(l)->forward(x)}, 1));
  return head(x);
}

}  // namespace minidl::models
