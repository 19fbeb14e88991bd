// Element types. float32 is the default; float64 exists for gradient checks;
// int64 holds labels and counters; uint8 holds images. float16/bfloat16
// (core/half.h) are storage types for mixed precision: on CPU they are
// created, filled, converted, printed and saved, but compute kernels take
// float32/float64 only and refuse them with an error naming the op.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "minidl/core/check.h"
#include "minidl/core/half.h"

namespace minidl {

enum class DType : uint8_t { Float32, Float64, Int64, UInt8, Float16, BFloat16 };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::UInt8: return 1;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
  }
  return 0;
}

// PyTorch's names: "float32", "int64", ...
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t != DType::Int64 && t != DType::UInt8; }

// Compile-time mapping from C++ type to DType.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

constexpr bool is_reduced_floating(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// The type a reduction accumulates T in: float for the 16-bit types (they
// have no arithmetic), integers in int64. PyTorch's CUDA acc_type; its CPU
// one widens float to double, which minidl's CPU reductions choose per kernel.
template <class T> struct acc_type { using type = T; };
template <> struct acc_type<Half> { using type = float; };
template <> struct acc_type<BFloat16> { using type = float; };
template <> struct acc_type<uint8_t> { using type = int64_t; };
template <class T> using acc_type_t = typename acc_type<T>::type;

// PyTorch's ScalarType names, for its promotion messages ("result type Float
// can't be cast to the desired output type Byte").
constexpr const char* scalar_type_name(DType t) {
  switch (t) {
    case DType::Float32: return "Float";
    case DType::Float64: return "Double";
    case DType::Int64: return "Long";
    case DType::UInt8: return "Byte";
    case DType::Float16: return "Half";
    case DType::BFloat16: return "BFloat16";
  }
  return "?";
}

// PyTorch's C++ type names, for its messages ("c10::Half").
constexpr const char* c10_type_name(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Int64: return "int64_t";
    case DType::UInt8: return "uint8_t";
    case DType::Float16: return "c10::Half";
    case DType::BFloat16: return "c10::BFloat16";
  }
  return "?";
}

// True when a scalar stored into a `dtype` tensor (fill_, full, clamp's
// bounds, add's alpha) is finite but beyond the dtype's largest value:
// PyTorch refuses these ("value cannot be converted to type float without
// overflow") rather than storing inf, even when the value would round down to
// the largest one (65504.5). inf and NaN are fine; so are the wrapped scalars
// of arithmetic (x + 1e39 is inf), which do not come here.
inline bool scalar_overflows(DType dtype, double value) {
  if (!std::isfinite(value)) return false;
  if (dtype == DType::Float16) return std::abs(value) > 65504.0;
  if (dtype == DType::BFloat16) return std::abs(value) > 0x1.FEp127;  // bfloat16 max, 0x7F7F
  if (dtype == DType::Float32) return std::abs(value) > 0x1.FFFFFEp127;  // FLT_MAX
  return false;
}

}  // namespace minidl

// Runs the body with `scalar_t` bound to the C++ type of `dtype`, for the CPU
// types a kernel supports. `op` names the operation in the error otherwise.
//   MINIDL_DISPATCH_FLOATING(x.dtype(), "softmax", [&] { kernel<scalar_t>(...); });
#define MINIDL_DISPATCH_CASE_(enum_value, type, ...) \
  case ::minidl::DType::enum_value: {                \
    using scalar_t = type;                           \
    return __VA_ARGS__();                            \
  }

#define MINIDL_DISPATCH_FLOATING(dtype, op, ...)                                          \
  [&] {                                                                                   \
    switch (dtype) {                                                                      \
      MINIDL_DISPATCH_CASE_(Float32, float, __VA_ARGS__)                                  \
      MINIDL_DISPATCH_CASE_(Float64, double, __VA_ARGS__)                                 \
      default:                                                                            \
        MINIDL_FAIL(op, ": expected a float32 or float64 tensor on CPU, got ",            \
                    ::minidl::dtype_name(dtype));                                         \
    }                                                                                     \
  }()

// MINIDL_DISPATCH_ALL plus Half and BFloat16, for the kernels that only move
// or convert values (copy, fill, factories, item, to_vector): they convert
// through minidl::convert<T>, never with arithmetic on the 16-bit types.
#define MINIDL_DISPATCH_ALL_AND_HALF(dtype, op, ...)                                      \
  [&] {                                                                                   \
    switch (dtype) {                                                                      \
      MINIDL_DISPATCH_CASE_(Float32, float, __VA_ARGS__)                                  \
      MINIDL_DISPATCH_CASE_(Float64, double, __VA_ARGS__)                                 \
      MINIDL_DISPATCH_CASE_(Int64, int64_t, __VA_ARGS__)                                  \
      MINIDL_DISPATCH_CASE_(UInt8, uint8_t, __VA_ARGS__)                                  \
      MINIDL_DISPATCH_CASE_(Float16, ::minidl::Half, __VA_ARGS__)                         \
      MINIDL_DISPATCH_CASE_(BFloat16, ::minidl::BFloat16, __VA_ARGS__)                    \
    }                                                                                     \
    MINIDL_FAIL(op, ": unknown dtype ", static_cast<int>(dtype));                         \
  }()

#define MINIDL_DISPATCH_ALL(dtype, op, ...)                                               \
  [&] {                                                                                   \
    switch (dtype) {                                                                      \
      MINIDL_DISPATCH_CASE_(Float32, float, __VA_ARGS__)                                  \
      MINIDL_DISPATCH_CASE_(Float64, double, __VA_ARGS__)                                 \
      MINIDL_DISPATCH_CASE_(Int64, int64_t, __VA_ARGS__)                                  \
      MINIDL_DISPATCH_CASE_(UInt8, uint8_t, __VA_ARGS__)                                  \
      default:                                                                            \
        MINIDL_FAIL(op, ": dtype ", ::minidl::dtype_name(dtype), " is not supported on CPU"); \
    }                                                                                     \
  }()
