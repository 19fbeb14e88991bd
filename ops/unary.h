// Elementwise unary ops and activations (integer tensors: see ops/unary.cpp).
#pragma once

#include <limits>
#include <optional>
#include <string>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
// An integer tensor keeps its dtype with an integer exponent, else computes in float32.
Tensor pow(const Tensor& x, Scalar exponent);
// Either bound may be absent; PyTorch: "At least one of 'min' or 'max' must not be None".
// An integer tensor with a floating bound computes in float32.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor gelu(const Tensor& x, const std::string& approximate = "none");  // "none" | "tanh"

// ---- kernel interface (a backend registers its kernels here) ----------------

enum class UnaryOp { Neg, Exp, Log, Sqrt, Rsqrt, Abs, Pow, Clamp, Relu, LeakyRelu, Sigmoid, Tanh, Gelu, GeluTanh };
const char* unary_op_name(UnaryOp op);

struct UnaryParams {
  double scalar = 0.0;  // pow's exponent, leaky_relu's negative_slope
  double lo = -std::numeric_limits<double>::infinity();  // clamp's bounds (infinite: absent)
  double hi = std::numeric_limits<double>::infinity();
};

// out = op(x); same shape, x may be strided.
using UnaryFn = void(UnaryOp op, const UnaryParams& p, const Tensor& out, const Tensor& x);
// dx = grad * op'(.) computed from `saved`: x or y = op(x), whichever the op
// keeps (see ops/unary.cpp). All have grad's shape; dx is contiguous.
using UnaryBackwardFn = void(UnaryOp op, const UnaryParams& p, const Tensor& dx, const Tensor& grad,
                             const Tensor& saved);
extern DispatchStub<UnaryFn> unary_stub;
extern DispatchStub<UnaryBackwardFn> unary_backward_stub;
void register_unary_cpu_kernels();

}  // namespace minidl
