// Gradient clipping, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace minidl::optim {

// Scales the gradients of `params` in place so that their total norm (the
// norm_type-norm of the vector of per-gradient norms; norm_type may be
// INFINITY) is at most max_norm: every gradient is multiplied by
// min(1, max_norm / (total_norm + 1e-6)), as PyTorch. Parameters without a
// gradient are skipped; with none, returns 0. Returns the total norm before
// clipping (a double, as libtorch's clip_grad_norm_). A non-finite total norm
// throws when error_if_nonfinite, otherwise the gradients are scaled by it
// (as PyTorch, they become NaN).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace minidl::optim
