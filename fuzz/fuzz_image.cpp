// One ImageFolder image file (PNG, JPEG, BMP, TGA, GIF) through stb_image,
// decoded to 1, 3 or 4 channels (the input's first byte picks).
#include "fuzz/fuzz_util.h"
#include "minidl/data/image_folder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return minidl::fuzz::run(data, size, [](std::string_view bytes) {
    if (bytes.empty()) return;
    const int channels[] = {1, 3, 4};
    minidl::data::decode_image(bytes.substr(1), channels[static_cast<uint8_t>(bytes[0]) % 3], "fuzz.png");
  });
}
