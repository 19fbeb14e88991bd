// Element types. float32 is the default; float64 exists for gradient checks;
// int64 holds labels and counters; uint8 holds images. float16/bfloat16 are
// reserved for the CUDA backend (mixed precision) and have no CPU kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/check.h"

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
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

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
