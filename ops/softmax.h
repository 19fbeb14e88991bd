// softmax and log_softmax along one dim, computed stably (max subtracted).
#pragma once

#include "core/tensor.h"

namespace minidl {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace minidl
