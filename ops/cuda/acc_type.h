// The compute ("accumulate") type of the CUDA kernels for each element type,
// PyTorch's at::acc_type on CUDA for the floating types: float16 and bfloat16
// are loaded as float, computed in float and rounded once on store; float and
// double compute in themselves (so their kernels are the same code as before
// the 16-bit types were added) and integers too. This is the CPU kernels'
// 16-bit convention (ops/cpu/float32_compute.h: widen to float32, run the
// float32 kernel, round the outputs), so a CUDA 16-bit result can be compared
// with the CPU one on the same 16-bit inputs. Reductions that accumulate
// float32 in double keep doing so for the 16-bit types (the CPU float32
// kernel they are compared with does). Plain C++, usable from CPU tests.
#pragma once

#include <type_traits>

#include "minidl/core/half.h"  // Half, BFloat16, convert, MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

template <class T>
struct AccType {
  using type = T;
};
template <>
struct AccType<Half> {
  using type = float;
};
template <>
struct AccType<BFloat16> {
  using type = float;
};

template <class T>
using acc_type = typename AccType<T>::type;

// float, double, Half, BFloat16.
template <class T>
inline constexpr bool is_floating_v = std::is_floating_point_v<T> || is_half_v<T>;

// A stored value as its compute type (exact for every T).
template <class T>
MINIDL_HOST_DEVICE inline acc_type<T> to_acc(T v) {
  return static_cast<acc_type<T>>(v);
}

// A computed value (float, double, ...) stored as T: one rounding (Half and
// BFloat16 round to nearest even through float, as minidl::convert).
template <class T, class A>
MINIDL_HOST_DEVICE inline T from_acc(A v) {
  return convert<T>(v);
}

}  // namespace minidl::cuda_math
