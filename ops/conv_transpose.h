// Transposed convolutions (PyTorch's conv_transpose2d / conv_transpose3d):
// the adjoint of conv2d / conv3d with respect to its input, often used to
// upsample (a 2x2 kernel with stride 2 doubles every spatial size).
#pragma once

#include <array>
#include <cstdint>

#include "minidl/core/tensor.h"

namespace minidl {

template <size_t D>
struct ConvTransposeParams {
  std::array<int64_t, D> stride = filled(1);
  std::array<int64_t, D> padding = filled(0);
  std::array<int64_t, D> output_padding = filled(0);
  int64_t groups = 1;
  std::array<int64_t, D> dilation = filled(1);

  static constexpr std::array<int64_t, D> filled(int64_t v) {
    std::array<int64_t, D> a{};
    a.fill(v);
    return a;
  }
};
using ConvTranspose2dParams = ConvTransposeParams<2>;
using ConvTranspose3dParams = ConvTransposeParams<3>;

// x: (N, C_in, H, W) or unbatched (C_in, H, W); weight: (C_in, C_out/groups, kH, kW);
// bias: (C_out) or undefined. Output size per dimension (PyTorch's formula):
//   (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
// output_padding (< stride or < dilation) picks among the sizes that a
// strided conv2d maps to the same input size.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose2dParams& params = {});
// The same in 3-D: x (N, C_in, D, H, W) or (C_in, D, H, W); weight (C_in, C_out/groups, kD, kH, kW).
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose3dParams& params = {});

}  // namespace minidl
