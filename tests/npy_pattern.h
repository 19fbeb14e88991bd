// The value pattern shared by the .npy tests, examples/npy_tool and
// scripts/check_npy.py (which computes the same numbers with NumPy): element
// i (C order) of a pattern array of dtype T is
//   bool    i % 3 == 0              uint8   (i * 37) % 256
//   uint16  (i * 2731) % 65536      int32   i * 100003 - 1000000
//   int64   i * 3000000000 - 5      float32 i * 0.25 - 3
//   float64 i / 3.0 - 2
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "minidl/data/npy.h"

namespace minidl::testing {

inline constexpr data::NpyDType kAllNpyDTypes[] = {
    data::NpyDType::Bool,  data::NpyDType::UInt8,   data::NpyDType::UInt16,  data::NpyDType::Int32,
    data::NpyDType::Int64, data::NpyDType::Float32, data::NpyDType::Float64,
};

// "b1", "u1", "u2", "i4", "i8", "f4", "f8": the descr without its byte order.
inline std::string npy_dtype_file_stem(data::NpyDType dt) { return std::string(data::npy_descr(dt)).substr(1); }

template <class T>
void npy_put(std::vector<uint8_t>& bytes, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  bytes.insert(bytes.end(), b, b + sizeof(T));
}

inline data::NpyArray npy_pattern(data::NpyDType dt, std::vector<int64_t> shape) {
  using data::NpyDType;
  data::NpyArray a;
  a.dtype = dt;
  a.shape = std::move(shape);
  for (int64_t i = 0; i < a.numel(); ++i) {
    switch (dt) {
      case NpyDType::Bool: npy_put<uint8_t>(a.data, i % 3 == 0); break;
      case NpyDType::UInt8: npy_put<uint8_t>(a.data, static_cast<uint8_t>((i * 37) % 256)); break;
      case NpyDType::UInt16: npy_put<uint16_t>(a.data, static_cast<uint16_t>((i * 2731) % 65536)); break;
      case NpyDType::Int32: npy_put<int32_t>(a.data, static_cast<int32_t>(i * 100003 - 1000000)); break;
      case NpyDType::Int64: npy_put<int64_t>(a.data, i * 3000000000LL - 5); break;
      case NpyDType::Float32: npy_put<float>(a.data, static_cast<float>(static_cast<double>(i) * 0.25 - 3)); break;
      case NpyDType::Float64: npy_put<double>(a.data, static_cast<double>(i) / 3.0 - 2); break;
    }
  }
  return a;
}

// Element i of any array, widened to long double (exact for every supported
// dtype where long double has a 64-bit mantissa, as on x86-64).
inline long double npy_element(const data::NpyArray& a, int64_t i) {
  using data::NpyDType;
  const uint8_t* p = a.data.data() + i * static_cast<int64_t>(data::npy_itemsize(a.dtype));
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return static_cast<long double>(v);
  };
  switch (a.dtype) {
    case NpyDType::Bool:
    case NpyDType::UInt8: return get(uint8_t{});
    case NpyDType::UInt16: return get(uint16_t{});
    case NpyDType::Int32: return get(int32_t{});
    case NpyDType::Int64: return get(int64_t{});
    case NpyDType::Float32: return get(float{});
    case NpyDType::Float64: return get(double{});
  }
  return 0;
}

}  // namespace minidl::testing
