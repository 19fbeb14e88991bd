// The type the CUDA kernels compute in for each element type, PyTorch's
// at::opmath_type: float16 and bfloat16 are loaded as float, computed in
// float and rounded once on store; float, double and the integers compute in
// themselves, so their kernels are the same code as before the 16-bit types
// were added. (Not core/dtype.h's acc_type, which widens uint8 to int64.)
// This is the CPU kernels' 16-bit convention (ops/cpu/float32_compute.h:
// widen to float32, run the float32 kernel, round the outputs), so a CUDA
// 16-bit result can be compared with the CPU one on the same 16-bit inputs.
// Reductions that accumulate float32 in double keep doing so for the 16-bit
// types (the CPU float32 kernel they are compared with does). Plain C++,
// usable from CPU tests.
#pragma once

#include <type_traits>

#include "minidl/core/half.h"  // Half, BFloat16, convert, MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

template <class T>
struct OpMathType {
  using type = T;
};
template <>
struct OpMathType<Half> {
  using type = float;
};
template <>
struct OpMathType<BFloat16> {
  using type = float;
};

template <class T>
using opmath_t = typename OpMathType<T>::type;

// float, double, Half, BFloat16.
template <class T>
inline constexpr bool is_floating_v = std::is_floating_point_v<T> || is_half_v<T>;

// A stored value as its compute type (exact for every T).
template <class T>
MINIDL_HOST_DEVICE inline opmath_t<T> to_opmath(T v) {
  return static_cast<opmath_t<T>>(v);
}

// A computed value (float, double, ...) stored as T: one rounding (Half and
// BFloat16 round to nearest even through float, as minidl::convert).
template <class T, class A>
MINIDL_HOST_DEVICE inline T from_opmath(A v) {
  return convert<T>(v);
}

}  // namespace minidl::cuda_math
