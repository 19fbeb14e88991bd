// softmax and log_softmax along one dim, computed stably (max subtracted).
#pragma once

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- kernel interface (a backend registers its kernels here) ----------------

// y = softmax(x) (or log_softmax) along `dim`; all contiguous, same shape.
using SoftmaxForwardFn = void(const Tensor& x, const Tensor& y, int64_t dim, bool log);
// grad_x from grad_y and the saved output y (the same layout).
using SoftmaxBackwardFn = void(const Tensor& grad_y, const Tensor& y, const Tensor& grad_x, int64_t dim, bool log);

extern DispatchStub<SoftmaxForwardFn> softmax_forward_stub;
extern DispatchStub<SoftmaxBackwardFn> softmax_backward_stub;
void register_softmax_cpu_kernels();

}  // namespace minidl
