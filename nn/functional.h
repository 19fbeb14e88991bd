// nn::functional: the stateless counterparts of the layers, as
// torch.nn.functional. They are the ops themselves (ops/*.h), re-exported so
// model code can write `namespace F = minidl::nn::functional; F::relu(x)`.
// Pooling sizes also accept a single int here (F::max_pool2d(x, 2)).
#pragma once

#include <optional>

#include "minidl/nn/options.h"
#include "minidl/ops/batch_norm.h"
#include "minidl/ops/binary_cross_entropy.h"
#include "minidl/ops/conv2d.h"
#include "minidl/ops/conv3d.h"
#include "minidl/ops/conv_padding.h"
#include "minidl/ops/conv_transpose.h"
#include "minidl/ops/dice_loss.h"
#include "minidl/ops/dropout.h"
#include "minidl/ops/group_norm.h"
#include "minidl/ops/instance_norm.h"
#include "minidl/ops/interpolate.h"
#include "minidl/ops/layer_norm.h"
#include "minidl/ops/loss.h"
#include "minidl/ops/matmul.h"
#include "minidl/ops/pad.h"
#include "minidl/ops/pooling.h"
#include "minidl/ops/softmax.h"
#include "minidl/ops/unary.h"

namespace minidl::nn::functional {

using minidl::batch_norm;
using minidl::bce_dice_loss;
using minidl::binary_cross_entropy;
using minidl::binary_cross_entropy_with_logits;
using minidl::conv2d;
using minidl::Conv2dParams;
using minidl::conv3d;
using minidl::Conv3dParams;
using minidl::conv_transpose2d;
using minidl::conv_transpose3d;
using minidl::ConvTranspose2dParams;
using minidl::ConvTranspose3dParams;
using minidl::cross_entropy;
using minidl::dice_loss;
using minidl::dropout;
using minidl::gelu;
using minidl::group_norm;
using minidl::instance_norm;
using minidl::interpolate;
using minidl::InterpolateOptions;
using minidl::layer_norm;
using minidl::leaky_relu;
using minidl::linear;
using minidl::log_softmax;
using minidl::mse_loss;
using minidl::nll_loss;
using minidl::pad;
using minidl::PadMode;
using minidl::Reduction;
using minidl::relu;
using minidl::sigmoid;
using minidl::softmax;
using minidl::tanh;

// stride defaults to the kernel size (PyTorch's stride=None). Arguments are in
// torch.nn.functional's order (avg_pool: ceil_mode before count_include_pad).
inline Tensor max_pool2d(const Tensor& x, Int2 kernel_size, std::optional<Int2> stride = std::nullopt,
                         Int2 padding = 0, Int2 dilation = 1, bool ceil_mode = false) {
  return minidl::max_pool2d(x, kernel_size, stride.value_or(kernel_size), padding, dilation, ceil_mode);
}
inline Tensor avg_pool2d(const Tensor& x, Int2 kernel_size, std::optional<Int2> stride = std::nullopt,
                         Int2 padding = 0, bool ceil_mode = false, bool count_include_pad = true,
                         std::optional<int64_t> divisor_override = std::nullopt) {
  return minidl::avg_pool2d(x, kernel_size, stride.value_or(kernel_size), padding, ceil_mode, count_include_pad,
                            divisor_override);
}
inline Tensor adaptive_avg_pool2d(const Tensor& x, Int2 output_size) {
  return minidl::adaptive_avg_pool2d(x, output_size);
}
inline Tensor adaptive_max_pool2d(const Tensor& x, Int2 output_size) {
  return minidl::adaptive_max_pool2d(x, output_size);
}
inline Tensor max_pool3d(const Tensor& x, Int3 kernel_size, std::optional<Int3> stride = std::nullopt,
                         Int3 padding = 0, Int3 dilation = 1, bool ceil_mode = false) {
  return minidl::max_pool3d(x, kernel_size, stride.value_or(kernel_size), padding, dilation, ceil_mode);
}
inline Tensor avg_pool3d(const Tensor& x, Int3 kernel_size, std::optional<Int3> stride = std::nullopt,
                         Int3 padding = 0, bool ceil_mode = false, bool count_include_pad = true,
                         std::optional<int64_t> divisor_override = std::nullopt) {
  return minidl::avg_pool3d(x, kernel_size, stride.value_or(kernel_size), padding, ceil_mode, count_include_pad,
                            divisor_override);
}
inline Tensor adaptive_avg_pool3d(const Tensor& x, Int3 output_size) {
  return minidl::adaptive_avg_pool3d(x, output_size);
}
inline Tensor adaptive_max_pool3d(const Tensor& x, Int3 output_size) {
  return minidl::adaptive_max_pool3d(x, output_size);
}

}  // namespace minidl::nn::functional
