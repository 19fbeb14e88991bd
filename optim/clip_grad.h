// Gradient clipping, as torch.nn.utils.clip_grad_norm_ and the two halves
// PyTorch 2.6 split it into, get_total_norm and clip_grads_with_norm_.
//
// Everything runs on the gradients' device through kernels (ops/fused_optim.h):
// the per-gradient norms, their combination and the scaling. Only
// clip_grad_norm_, which returns a double as libtorch's, reads the total norm
// back to the host (one device-to-host copy, a synchronization on CUDA). A
// training loop that must not wait uses the Tensor form:
//
//   Tensor total = optim::get_total_norm(grads);           // a float64 0-d device tensor
//   optim::clip_grads_with_norm_(params, max_norm, total); // no host read
//   ...; log(total.item());                                // read it when convenient
#pragma once

#include <vector>

#include "minidl/core/tensor.h"

namespace minidl::optim {

// The norm_type-norm (norm_type > 0, or INFINITY) of the vector of
// per-tensor norms of `tensors` (undefined entries are skipped), as PyTorch:
// not one sum over all elements, which rounds differently. Computed in double
// on the first tensor's device (tensors on other devices send their norm
// there) and returned as a float64 0-d tensor on that device; with no
// tensors, a 0-d CPU zero. error_if_nonfinite reads the total on the host (as
// PyTorch's check does) and throws PyTorch's error when it is NaN or infinite.
// Two deliberate differences: in double, float32 gradients whose norm passes
// float32's range (3.4e38) give a finite total, where PyTorch's float32 total
// is inf (its clip then zeroes them, or error_if_nonfinite raises); and
// norm_type 0 (count of nonzeros) and negative orders, which PyTorch accepts
// but no clipping uses, are refused.
Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type = 2.0, bool error_if_nonfinite = false);

// Multiplies every defined gradient of `params` in place by
// min(1, max_norm / (total_norm + 1e-6)), as PyTorch (also when the factor is
// 1, so a NaN norm makes the gradients NaN). total_norm: a one-element
// floating tensor on any device (moved to each gradient's device once).
void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, const Tensor& total_norm);

// get_total_norm of the gradients of `params`, then clip_grads_with_norm_;
// returns the total norm before clipping as a double (0 when no parameter has
// a gradient). A non-finite total norm throws when error_if_nonfinite (before
// any gradient changes); otherwise the gradients are scaled by it.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace minidl::optim
