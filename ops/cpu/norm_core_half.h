// Normalization of float16/bfloat16 input read and written directly
// (BatchNorm with float32 parameters; GroupNorm, LayerNorm, InstanceNorm with
// float32 or 16-bit parameters): see ops/cpu/norm_core_half.cpp.
#pragma once

#include "minidl/ops/norm_core.h"

namespace minidl::norm {

// Run the kernel and return true when the arguments are that case, else
// return false (the caller then widens the 16-bit tensors to float32).
bool forward_half_cpu(const NormForwardArgs& args);
bool backward_half_cpu(const NormBackwardArgs& args);

}  // namespace minidl::norm
