// Group normalization (PyTorch's F.group_norm): channels split into num_groups
// groups; statistics per (sample, group) over the group's channels and the
// spatial dims, biased variance; per-channel affine.
#pragma once

#include <cstdint>

#include "minidl/core/tensor.h"

namespace minidl {

// input: (N, C, *) with at least 2 dims, C divisible by num_groups, else
// "Expected number of channels in input to be divisible by num_groups, but got
// input of shape [2, 6, 4] and num_groups=4". weight/bias: (C), optional.
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace minidl
