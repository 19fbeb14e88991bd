// Losses with PyTorch's arguments and defaults.
#pragma once

#include <string>

#include "core/tensor.h"

namespace minidl {

enum class Reduction { None, Mean, Sum };

// input: (N, C) or (N, C, d1, ...) logits; target: int64 class indices (N) or (N, d1, ...).
Tensor cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);
// input: log-probabilities, same layout as cross_entropy.
Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace minidl
