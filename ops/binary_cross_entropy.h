// Binary cross-entropy on probabilities and on logits, with PyTorch's
// arguments, defaults and reductions (torch.nn.functional.binary_cross_entropy
// and binary_cross_entropy_with_logits).
#pragma once

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"
#include "minidl/ops/loss.h"

namespace minidl {

// input: probabilities in [0, 1] (checked: "all elements of input should be
// between 0 and 1"); target: same shape and dtype. Each log is clamped to
// >= -100, so input 0 or 1 gives a finite loss (100 at most), as PyTorch.
// weight: optional, broadcast to the input's shape; it gets no gradient.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                            Reduction reduction = Reduction::Mean);

// input: logits; the stable form of binary_cross_entropy(sigmoid(input), ...):
//   loss = (1 - t) x - (1 + (pos_weight - 1) t) * log_sigmoid(x),  then * weight.
// pos_weight weighs the positive term and broadcasts to the input's shape with
// PyTorch's rules: (C) for (N, C) input; for (N, C, H, W) give it (C, 1, 1)
// to weigh each class over all pixels. weight and pos_weight get no gradient.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                        Reduction reduction = Reduction::Mean, const Tensor& pos_weight = Tensor());

// ---- kernel interface (a backend registers its kernels here) ----------------
// Elementwise, before weight and reduction; every tensor contiguous with the
// input's shape (pos_weight expanded to it, or undefined); gx or gt may be
// undefined (not needed).

// out = -(t max(log x, -100) + (1 - t) max(log(1 - x), -100)). The CPU kernel
// throws if an x is outside [0, 1] (or NaN); a CUDA kernel would assert on the
// device instead, as PyTorch's (the op never reads input values on the host).
using BceForwardFn = void(const Tensor& x, const Tensor& t, const Tensor& out);
// gx = g (x - t) / max(x (1 - x), 1e-12),  gt = g (log(1 - x) - log x)   (PyTorch's formulas)
using BceBackwardFn = void(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& gx, const Tensor& gt);
// out = (1 - t) x - l log_sigmoid(x) with l = 1 + (pw - 1) t (pw = 1 when undefined).
using BceLogitsForwardFn = void(const Tensor& x, const Tensor& t, const Tensor& pos_weight, const Tensor& out);
// gx = g (l sigmoid(x) - pw t),  gt = g (log_sigmoid(-x) - pw log_sigmoid(x)).
using BceLogitsBackwardFn = void(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& pos_weight,
                                 const Tensor& gx, const Tensor& gt);

extern DispatchStub<BceForwardFn> bce_forward_stub;
extern DispatchStub<BceBackwardFn> bce_backward_stub;
extern DispatchStub<BceLogitsForwardFn> bce_logits_forward_stub;
extern DispatchStub<BceLogitsBackwardFn> bce_logits_backward_stub;
// Called by register_loss_cpu_kernels (ops/cpu/loss.cpp).
void register_bce_cpu_kernels();

}  // namespace minidl
