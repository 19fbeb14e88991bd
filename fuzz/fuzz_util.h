// What every fuzz target shares: the input as bytes, and the rule that a
// parser may refuse its input only with minidl::Error. Any other exception
// escapes LLVMFuzzerTestOneInput and libFuzzer reports it as a crash, as it
// does ASan/UBSan findings, timeouts and allocations over -rss_limit_mb.
//
// A new target (e.g. .npy) is fuzz/fuzz_<name>.cpp:
//   #include "fuzz/fuzz_util.h"
//   #include "minidl/data/npy.h"
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     return minidl::fuzz::run(data, size, [](std::string_view bytes) { minidl::parse_npy(bytes, "fuzz.npy"); });
//   }
// plus a few small seed files in fuzz/corpus/<name>/; fuzz/CMakeLists.txt
// and fuzz/run.sh pick both up by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "minidl/core/check.h"

namespace minidl::fuzz {

template <class Fn>
int run(const uint8_t* data, size_t size, Fn&& parse) {
  try {
    parse(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const minidl::Error&) {
    // A refused input: what a parser should do with garbage.
  }
  return 0;
}

}  // namespace minidl::fuzz
