// Inspect .npy files the way minidl reads them, and write sample files.
//
//   npy_tool info FILE...       one line per file: descr, shape, element sum;
//                               a file minidl refuses prints the reason (with
//                               the byte offset) and the exit status is 1
//   npy_tool write-samples DIR  one small file per supported dtype, filled
//                               with npy_sample_value() (scripts/check_npy.py
//                               loads them with NumPy and compares)
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "examples/common/main_guard.h"
#include "minidl/data/npy.h"
#include "tests/npy_pattern.h"

using namespace minidl;
using data::NpyArray;
using data::NpyDType;

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  if (s.size() == 1) out += ",";
  return out + ")";
}

int info(int argc, char** argv) {
  int status = 0;
  for (int k = 2; k < argc; ++k) {
    try {
      const NpyArray a = data::load_npy(argv[k]);
      long double sum = 0;
      for (int64_t i = 0; i < a.numel(); ++i) sum += testing::npy_element(a, i);
      std::printf("%s: descr '%s' shape %s sum %.17Lg\n", argv[k], data::npy_descr(a.dtype), shape_str(a.shape).c_str(),
                  sum);
    } catch (const std::exception& e) {
      std::printf("%s: refused: %s\n", argv[k], e.what());
      status = 1;
    }
  }
  return status;
}

int write_samples(const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (NpyDType dt : testing::kAllNpyDTypes) {
    const NpyArray a = testing::npy_pattern(dt, {2, 3, 4});
    const std::string path = dir + "/" + testing::npy_dtype_file_stem(dt) + ".npy";
    data::save_npy(path, a);
    std::printf("%s\n", path.c_str());
  }
  // Also through the Tensor overload, and the shape corner cases.
  data::save_npy(dir + "/tensor_f4.npy", data::npy_to_tensor(testing::npy_pattern(NpyDType::Float32, {5, 1, 3})));
  data::save_npy(dir + "/scalar_f8.npy", testing::npy_pattern(NpyDType::Float64, {}));
  data::save_npy(dir + "/vector_i8.npy", testing::npy_pattern(NpyDType::Int64, {7}));
  data::save_npy(dir + "/empty_u1.npy", testing::npy_pattern(NpyDType::UInt8, {0, 3}));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "npy_tool info FILE... | npy_tool write-samples DIR";
  return examples::run_main_with_usage("npy_tool", usage, argc, argv, [&] {
    if (argc >= 3 && std::strcmp(argv[1], "info") == 0) return info(argc, argv);
    if (argc == 3 && std::strcmp(argv[1], "write-samples") == 0) return write_samples(argv[2]);
    throw examples::UsageError(argc < 2 ? "no command given" : std::string("unknown command or arguments: ") + argv[1]);
  });
}
