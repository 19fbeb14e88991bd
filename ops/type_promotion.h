// PyTorch's type promotion where an op meets an integer tensor: the helpers
// ops/binary.cpp and ops/unary.cpp share (their definitions: ops/binary.cpp).
//   integer tensor (+ - * s) floating scalar -> float32   (uint8 * 2.0 is 400., not 144)
//   integer tensor / anything                 -> float32   (true division)
//   exp, log, sqrt, rsqrt, sigmoid, tanh      -> float32
//   pow(integer tensor, floating exponent)    -> float32; an integer exponent keeps the dtype
//   clamp(integer tensor, a floating bound)   -> float32
// (uint8 with an integer scalar stays uint8, the scalar taken modulo 256.)
// float32 is PyTorch's default dtype. Integer tensors carry no gradient, so
// the cast records nothing.
#pragma once

#include "minidl/core/scalar.h"
#include "minidl/core/tensor.h"

namespace minidl {

bool is_integer_tensor(const Tensor& t);  // defined and not floating
Tensor float32_if_integer(const Tensor& t);
// Whether value lies within an integer dtype's range (uint8: [0, 256), int64: [-2^63, 2^63)).
bool in_integer_range(DType dtype, double value);
// An int64 tensor with an integer scalar the kernels' double would round
// (past 2^53) takes it as a one-element int64 tensor on a's device: the
// tensor path, exact (binary ops, clamp).
bool needs_exact_operand(const Tensor& a, Scalar s);
Tensor exact_operand(const Tensor& a, Scalar s);

}  // namespace minidl
