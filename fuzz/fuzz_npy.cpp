// .npy files (data/npy.h): any input parses into a consistent array (its
// bytes match its shape and dtype) or is refused with minidl::Error. Seeds:
// the NumPy-written fixtures of tests/goldens/npy/, refused ones included.
#include <cstdlib>

#include "fuzz/fuzz_util.h"
#include "minidl/data/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return minidl::fuzz::run(data, size, [](std::string_view bytes) {
    const minidl::data::NpyArray a = minidl::data::parse_npy(bytes.data(), bytes.size(), "fuzz.npy");
    if (a.data.size() != static_cast<size_t>(a.numel()) * minidl::data::npy_itemsize(a.dtype)) std::abort();
  });
}
