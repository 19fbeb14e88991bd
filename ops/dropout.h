// Inverted dropout: in training, zeroes each element with probability p and
// scales the rest by 1/(1-p); identity in eval. Draws from the default Generator.
#pragma once

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);

// ---- kernel interface (a backend registers its kernels here) ----------------

class Generator;

// Draws mask = keep / (1 - p) from gen (x contiguous) and writes y = x * mask.
using DropoutForwardFn = void(const Tensor& x, const Tensor& y, const Tensor& mask, double p, Generator& gen);
// grad_x = grad_y * mask.
using DropoutBackwardFn = void(const Tensor& grad_y, const Tensor& mask, const Tensor& grad_x);

extern DispatchStub<DropoutForwardFn> dropout_forward_stub;
extern DispatchStub<DropoutBackwardFn> dropout_backward_stub;
void register_dropout_cpu_kernels();

}  // namespace minidl
