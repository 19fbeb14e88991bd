// The safetensors file format, as Hugging Face's `safetensors` package writes it:
//   8 bytes   N, the header length (little-endian uint64)
//   N bytes   JSON: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                    ..., "__metadata__": {"key": "value"}}
//   rest      raw little-endian tensor data; data_offsets count from the end of the header.
// Files written here load with `safetensors.torch.load_file` and the other way round.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "minidl/core/tensor.h"

namespace minidl {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the order of their data in the file
  std::map<std::string, std::string> metadata;

  bool contains(const std::string& name) const;
  // The tensor called `name`; throws minidl::Error naming it when there is none.
  const Tensor& at(const std::string& name) const;
};

// Writes `tensors` (any device, any strides; copied to contiguous CPU memory
// first) and `metadata` to `path`. The bytes go to `path.tmp.<pid>`, are
// fsync'ed, then renamed over `path`: a crash never leaves a half-written file.
// Data of the same dtype keep their order; wider dtypes come first, so every
// tensor's data is aligned to its element size.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a whole file into CPU tensors. Refuses (minidl::Error naming the file
// and the byte offset) a missing or truncated file, a bad header, an unknown
// dtype, a shape that does not match its data_offsets, and overlapping or
// out-of-range data.
SafetensorsFile load_safetensors(const std::string& path);

// The same from a file's bytes already in memory; `name` stands for the
// path in error messages.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& name);

// "F32", "F64", "I64", "U8", "F16", "BF16".
const char* safetensors_dtype_name(DType dtype);

}  // namespace minidl
