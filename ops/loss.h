// Losses with PyTorch's arguments and defaults.
#pragma once

#include <string>
#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

enum class Reduction { None, Mean, Sum };

// input: (N, C) or (N, C, d1, ...) logits; target: int64 class indices (N) or (N, d1, ...).
Tensor cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);
// input: log-probabilities, same layout as cross_entropy.
Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);
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
// count is an int64 0-d tensor on the input's device: the number of positions
// whose target is not ignore_index ("mean"'s divisor; PyTorch's total_weight
// without class weights). The forward kernel counts and writes it, so the
// targets never leave the device; the backward kernel reads it.
struct ReductionInfo {
  Reduction reduction = Reduction::Mean;
  Tensor count;

  void for_each_tensor(auto&& f) const { f(count); }
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
