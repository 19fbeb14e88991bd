// Losses with PyTorch's arguments and defaults.
#pragma once

#include <string>
#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

enum class Reduction { None, Mean, Sum };

// input: (N, C) or (N, C, d1, ...) logits (or (C)). target is either
//  - int64 class indices, (N) or (N, d1, ...): "mean" divides by the summed
//    weight[target] of the positions not equal to ignore_index, or
//  - class probabilities (soft labels) of input's shape and dtype: "mean"
//    divides by the number of positions N * d1 * ...; ignore_index must stay
//    negative (PyTorch: "ignore_index is not supported for floating point target").
// weight: optional per-class rescaling, a 1-D tensor of C elements (undefined: all 1).
// label_smoothing eps mixes the target with the uniform distribution, as PyTorch.
Tensor cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);
Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                     Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
// input: log-probabilities, same layout as cross_entropy with class-index targets.
Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// ---- kernel interface (a backend registers its kernels here) ----------------
// The class-loss kernels take targets that are class indices or ignore_index:
// the op checks their range for CPU tensors only (reading them elsewhere would
// be a host round trip; a CUDA kernel asserts on the device, as PyTorch's).

// A class loss's input seen as (N, C, S): one position per (n, s), classes C
// apart by S elements.
struct ClassGeometry {
  int64_t N = 1, C = 1, S = 1;
  int64_t positions() const { return N * S; }
  std::vector<int64_t> to_list() const { return {N, C, S}; }
  static ClassGeometry from_list(const std::vector<int64_t>& v) { return {v[0], v[1], v[2]}; }
};

// What the loss was reduced with, for forward output and backward weights.
// weight: the per-class weights (C, contiguous, input's dtype) or undefined.
// total_weight is a float64 0-d tensor on the input's device: the sum of
// weight[target] over the positions whose target is not ignore_index (their
// count without weights): "mean"'s divisor, PyTorch's total_weight. The
// forward kernel sums and writes it, so the targets never leave the device;
// the backward kernel reads it.
struct ReductionInfo {
  Reduction reduction = Reduction::Mean;
  Tensor weight;
  Tensor total_weight;

  void for_each_tensor(auto&& f) const {
    f(weight);
    f(total_weight);
  }
};

using CrossEntropyForwardFn = void(const Tensor& x, const Tensor& target, const Tensor& lse, const Tensor& out,
                                   const ClassGeometry& g, int64_t ignore_index, double eps, const ReductionInfo& r);
using CrossEntropyBackwardFn = void(const Tensor& grad_out, const Tensor& x, const Tensor& target, const Tensor& lse,
                                    const Tensor& gx, const ClassGeometry& g, int64_t ignore_index, double eps,
                                    const ReductionInfo& r);
using NllLossForwardFn = void(const Tensor& x, const Tensor& target, const Tensor& out, const ClassGeometry& g,
                              int64_t ignore_index, const ReductionInfo& r);
using NllLossBackwardFn = void(const Tensor& grad_out, const Tensor& target, const Tensor& gx, const ClassGeometry& g,
                               int64_t ignore_index, const ReductionInfo& r);
using MseLossForwardFn = void(const Tensor& x, const Tensor& y, const Tensor& out, Reduction reduction);
using MseLossBackwardFn = void(const Tensor& grad_out, const Tensor& x, const Tensor& y, const Tensor& gx,
                               const Tensor& gy, Reduction reduction);

extern DispatchStub<CrossEntropyForwardFn> cross_entropy_forward_stub;
extern DispatchStub<CrossEntropyBackwardFn> cross_entropy_backward_stub;
extern DispatchStub<NllLossForwardFn> nll_loss_forward_stub;
extern DispatchStub<NllLossBackwardFn> nll_loss_backward_stub;
extern DispatchStub<MseLossForwardFn> mse_loss_forward_stub;
extern DispatchStub<MseLossBackwardFn> mse_loss_backward_stub;
void register_loss_cpu_kernels();

}  // namespace minidl
