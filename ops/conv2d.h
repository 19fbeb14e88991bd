// 2-D convolution (cross-correlation, as PyTorch), NCHW.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace minidl {

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

// x: (N, C_in, H, W) or unbatched (C_in, H, W); weight: (C_out, C_in/groups, kH, kW);
// bias: (C_out) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dParams& params = {});

}  // namespace minidl
