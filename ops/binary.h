// Elementwise binary ops with NumPy/PyTorch broadcasting, their scalar forms,
// and the operators. Both tensors must have the same dtype and device (no
// silent promotion between tensors). A scalar adopts the tensor's dtype,
// except as PyTorch promotes: an integer tensor with a floating scalar
// (uint8 * 2.0, int64 + 0.5, int64 > 2.5) computes in float32, and division
// of integer tensors is true division in float32.
#pragma once

#include "minidl/core/dispatch.h"
#include "minidl/core/scalar.h"
#include "minidl/core/tensor.h"

namespace minidl {

Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor rsub(const Tensor& a, Scalar b);  // b - a
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
Tensor rdiv(const Tensor& a, Scalar b);  // b / a

// Comparisons give 0/1 in the dtype they compare in (no bool dtype): a's, or
// float32 for an integer a and a floating b; not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a);

// Reduces a broadcast gradient back to `shape` by summing the broadcast dims.
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);

// Throws unless `value` converts to `dtype` exactly (integer dtypes take whole
// numbers in range only, so an alpha of 0.5 never silently becomes 0) or, for
// float32, float16 and bfloat16, without overflow (PyTorch's check: 1e39 into
// float32 is refused, inf is not); `op` names the caller. (fill_ and the
// factories convert as PyTorch's instead: checked_scalar_value in core/tensor.h.)
void check_scalar_fits(DType dtype, double value, const char* op);

// ---- kernel interface (a backend registers its kernels here) ----------------

enum class BinaryOp { Add, Sub, Mul, Div, Maximum, Minimum, Eq, Gt, Lt };  // a +- alpha * b
const char* binary_op_name(BinaryOp op);

// out = op(a, b); all three have out's shape (a and b are broadcast views with
// stride 0 on broadcast dims); out may be a strided view that aliases a.
using BinaryFn = void(BinaryOp op, double alpha, const Tensor& out, const Tensor& a, const Tensor& b);
// out (shape S, zero-filled) += grad (shape G) summed over the dims where S broadcasts to G;
// `out_view` walks out with G's shape and stride 0 on those dims.
using SumToFn = void(const Tensor& out_view, const Tensor& grad);
// out = op(a, scalar), or op(scalar, a) when scalar_first (rsub, rdiv); out
// has a's shape and may alias it. The scalar is a kernel argument, converted
// to the tensor's dtype in the kernel: no 0-d tensor is made or copied.
using BinaryScalarFn = void(BinaryOp op, const Tensor& out, const Tensor& a, double scalar, bool scalar_first);
using FillFn = void(const Tensor& out, double value);  // out may be any strided view
extern DispatchStub<BinaryFn> binary_stub;
extern DispatchStub<BinaryScalarFn> binary_scalar_stub;
extern DispatchStub<SumToFn> sum_to_stub;
extern DispatchStub<FillFn> fill_stub;
void register_binary_cpu_kernels();

}  // namespace minidl
