// NumPy .npy files: one array per file, the format of np.save / np.load.
//
//   "\x93NUMPY" | major | minor | header length (uint16 LE for 1.0, uint32 LE
//   for 2.0 and 3.0) | header: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (64, 64, 64), }
//   padded with spaces to a multiple of 64 and ended by '\n' | raw data
//
// Supported: versions 1.0, 2.0, 3.0; C order; little-endian bool ('|b1'),
// uint8, uint16, int32, int64, float32 and float64. Everything else is refused
// with a minidl::Error that names the file and the byte offset of the problem:
// a wrong magic string, an unsupported version, a truncated file, a malformed
// header, fortran_order True, big-endian or other unsupported dtypes, and a
// data size that does not match the shape (too short or too long).
//
// parse_npy works on a memory buffer, so a fuzzer can call it directly;
// load_npy reads a file and parses it; save_npy writes a version 1.0 file
// (2.0 if the header does not fit 1.0) through a temporary file renamed into
// place, so a reader never sees a half-written file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "minidl/core/tensor.h"

namespace minidl::data {

enum class NpyDType { Bool, UInt8, UInt16, Int32, Int64, Float32, Float64 };

const char* npy_descr(NpyDType dtype);  // the descr np.save writes: "|b1", "|u1", "<u2", ...
size_t npy_itemsize(NpyDType dtype);

// An array as stored in the file: little-endian, C order.
struct NpyArray {
  NpyDType dtype = NpyDType::Float32;
  std::vector<int64_t> shape;  // () for a 0-d array
  std::vector<uint8_t> data;   // numel() * npy_itemsize(dtype) bytes

  int64_t numel() const;
};

// `name` only labels error messages (a path, or "<fuzz input>").
NpyArray parse_npy(const void* bytes, size_t size, const std::string& name);
NpyArray load_npy(const std::string& path);

// The complete file contents for `array`.
std::string format_npy(const NpyArray& array);
void save_npy(const std::string& path, const NpyArray& array);
// float32, float64, int64 and uint8 tensors (any device, any strides).
void save_npy(const std::string& path, const Tensor& tensor);

// Tensor <-> NpyArray. minidl has no bool, uint16 or int32 dtype: bool becomes
// uint8 (0/1), uint16 and int32 become int64 (lossless).
Tensor npy_to_tensor(const NpyArray& array);
NpyArray tensor_to_npy(const Tensor& tensor);

}  // namespace minidl::data
