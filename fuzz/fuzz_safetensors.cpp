// safetensors files (checkpoints, goldens): header length, header JSON,
// dtypes, shapes and data_offsets.
#include "fuzz/fuzz_util.h"
#include "minidl/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return minidl::fuzz::run(data, size, [](std::string_view bytes) {
    minidl::SafetensorsFile file = minidl::parse_safetensors(bytes, "fuzz.safetensors");
    for (const auto& [name, t] : file.tensors) (void)t.nbytes();
  });
}
