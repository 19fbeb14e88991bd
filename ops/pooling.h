// 2-D pooling, NCHW (or unbatched CHW).
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace minidl {

// stride defaults to kernel_size when given as {0, 0}, as PyTorch's stride=None.
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride = {0, 0}, std::array<int64_t, 2> padding = {0, 0});
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride = {0, 0}, std::array<int64_t, 2> padding = {0, 0},
                  bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
Tensor adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);

}  // namespace minidl
