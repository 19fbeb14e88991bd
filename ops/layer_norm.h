// Layer normalization (PyTorch's F.layer_norm): statistics over the trailing
// normalized_shape dims of each row, biased variance, same in train and eval.
#pragma once

#include "minidl/core/tensor.h"

namespace minidl {

// y = (x - mean) / sqrt(var_biased + eps) * weight + bias, with weight/bias of
// shape normalized_shape, each optional (Tensor()).
// The input's trailing dims must equal normalized_shape, else "Given
// normalized_shape=[5], expected input with shape [*, 5], but got input of size[3, 4]".
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

}  // namespace minidl
