// Instance normalization (PyTorch's F.instance_norm): batch norm of the input
// viewed as (1, N*C, *), i.e. statistics per (sample, channel) over the spatial
// dims, biased variance.
#pragma once

#include "minidl/core/tensor.h"

namespace minidl {

// input: (N, C, *) with at least 3 dims (the module adds the batch dim to
// unbatched input). weight/bias: (C), optional.
// use_input_stats=true (training, or no running stats): normalize with the
// per-instance stats; if running_mean/running_var (C) are defined, each
// instance's stats update a copy of them as batch_norm would, and the copies
// are averaged over N back into running_mean/running_var (in place):
//   running_mean = (1 - m) * running_mean + m * mean_n(instance means)
//   running_var  = (1 - m) * running_var  + m * mean_n(instance unbiased vars)
// One spatial element throws "Expected more than 1 spatial element when
// training, got input size [...]".
// use_input_stats=false: normalize with running_mean/running_var (required).
Tensor instance_norm(const Tensor& input, const Tensor& running_mean = Tensor(),
                     const Tensor& running_var = Tensor(), const Tensor& weight = Tensor(),
                     const Tensor& bias = Tensor(), bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);

}  // namespace minidl
