// Matrix products on Eigen's GEMM.
#pragma once

#include "core/tensor.h"

namespace minidl {

// 2-D x 2-D, batched 3-D x 3-D (or 3-D x 2-D), 1-D operands as in torch.matmul.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x W^T + b; x: (*, in), weight: (out, in), bias: (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace minidl
