// Matrix products (torch.matmul, F.linear).
#pragma once

#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

// 2-D x 2-D, batched 3-D x 3-D (or 3-D x 2-D), 1-D operands as in torch.matmul.
Tensor matmul(const Tensor& a, const Tensor& b);
// (B, n, m) x (B, m, p) -> (B, n, p), both 3-D, no broadcasting (torch.bmm).
Tensor bmm(const Tensor& a, const Tensor& b);
// y = x W^T + b; x: (*, in), weight: (out, in), bias: (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- kernel interface (a backend registers its kernels here) ----------------

// A batch of row-major products C[i] (+)= op(A[i]) op(B[i]), each matrix at its
// own element offset into a, b and c (broadcast operands repeat an offset).
struct GemmBatch {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  std::vector<int64_t> a_offset, b_offset, c_offset;
  // C += ... (several products may add into one C, so they run one after
  // another), else C = ... with distinct C matrices.
  bool accumulate = false;
};
using BatchedGemmFn = void(const GemmBatch&, const Tensor& a, const Tensor& b, const Tensor& c);
// y = x W^T + bias (bias may be undefined); x: rows x in, W: out x in, all contiguous.
using LinearForwardFn = void(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
// Any of dx, dw, dbias may be undefined (not wanted).
using LinearBackwardFn = void(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                              const Tensor& dw, const Tensor& dbias);

extern DispatchStub<BatchedGemmFn> batched_gemm_stub;
extern DispatchStub<LinearForwardFn> linear_forward_stub;
extern DispatchStub<LinearBackwardFn> linear_backward_stub;
void register_matmul_cpu_kernels();

}  // namespace minidl
