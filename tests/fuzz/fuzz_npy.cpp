// libFuzzer target for the .npy parser: any input must either parse into a
// consistent array or throw minidl::Error (never crash, hang or read out of
// bounds). Not part of ctest; build and run with clang, for example:
//
//   cmake --build build --target minidl
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Ibuild/include \
//     tests/fuzz/fuzz_npy.cpp data/npy.cpp build/libminidl.a -fopenmp -lstb -lz -o build/fuzz_npy
//   cp -r tests/goldens/npy /tmp/npy_corpus   # libFuzzer adds inputs to its corpus
//   build/fuzz_npy -max_total_time=60 /tmp/npy_corpus
//
// (data/npy.cpp is compiled again so that the parser itself is instrumented.)
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "minidl/core/check.h"
#include "minidl/data/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const minidl::data::NpyArray a = minidl::data::parse_npy(data, size, "<fuzz input>");
    if (a.data.size() != static_cast<size_t>(a.numel()) * minidl::data::npy_itemsize(a.dtype)) std::abort();
  } catch (const minidl::Error&) {
  }
  return 0;
}
