// Kernel interface of cross_entropy with class probabilities (soft targets),
// the fused form of ops/loss.cpp's log_softmax * target * weight sum. A device
// without these kernels runs that composition instead (CUDA, so far).
// The op itself is cross_entropy (ops/loss.h).
//
// Input x and target q: (N, C, S) views of one shape and dtype, contiguous;
// weights w (C) or undefined; q' = (1 - eps) q + eps / C:
//   lse = log sum_c exp(x_c),  loss = sum_c w_c q'_c (lse - x_c)
//   dx_c = g (softmax_c sum_k w_k q'_k - w_c q'_c),  dq_c = -g (1 - eps) w_c (x_c - lse)
// with g the upstream gradient of the position's loss ("mean" divides by N * S).
#pragma once

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"
#include "minidl/ops/loss.h"

namespace minidl {

// Writes lse (N * S positions) and out (per position for Reduction::None, else
// the sum or mean); r.total_weight gets N * S (the mean's divisor).
using CrossEntropyProbsForwardFn = void(const Tensor& x, const Tensor& q, const Tensor& lse, const Tensor& out,
                                        const ClassGeometry& g, double eps, const ReductionInfo& r);
// Writes gx, and gq when defined.
using CrossEntropyProbsBackwardFn = void(const Tensor& grad_out, const Tensor& x, const Tensor& q, const Tensor& lse,
                                         const Tensor& gx, const Tensor& gq, const ClassGeometry& g, double eps,
                                         const ReductionInfo& r);

extern DispatchStub<CrossEntropyProbsForwardFn> cross_entropy_probs_forward_stub;
extern DispatchStub<CrossEntropyProbsBackwardFn> cross_entropy_probs_backward_stub;

}  // namespace minidl
