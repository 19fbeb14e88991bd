// Elementwise binary ops with NumPy/PyTorch broadcasting, their scalar forms,
// and the operators. Both inputs must have the same dtype and device
// (no silent promotion); a scalar adopts the tensor's dtype.
#pragma once

#include "core/tensor.h"

namespace minidl {

Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor rdiv(const Tensor& a, double b);  // b / a

// Comparisons give float tensors of 0/1 in a's dtype (no bool dtype); not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

// Reduces a broadcast gradient back to `shape` by summing the broadcast dims.
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);

}  // namespace minidl
