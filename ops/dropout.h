// Inverted dropout: in training, zeroes each element with probability p and
// scales the rest by 1/(1-p); identity in eval. Draws from the default Generator.
#pragma once

#include "core/tensor.h"

namespace minidl {

Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);

}  // namespace minidl
