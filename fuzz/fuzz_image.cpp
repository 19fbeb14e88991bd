// One ImageFolder image file (PNG, JPEG, BMP, TGA, GIF) through stb_image,
// decoded to 1, 3 or 4 channels (the input's first byte picks).
#include <stb/stb_image.h>

#include "fuzz/fuzz_util.h"
#include "minidl/data/image_check.h"
#include "minidl/data/image_folder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return minidl::fuzz::run(data, size, [](std::string_view bytes) {
    if (bytes.empty()) return;
    const int channels[] = {1, 3, 4};
    const std::string_view file = bytes.substr(1);
    // Images of millions of pixels decode for seconds under ASan without
    // reaching other code: only their headers are fuzzed (decode_image's own
    // limit, 64 Mpx, is checked by tests/test_fuzz_regressions.cpp).
    minidl::data::check_image_bytes(file, "fuzz.png", /*whole_file=*/true);
    int w = 0, h = 0, n = 0;
    if (stbi_info_from_memory(reinterpret_cast<const stbi_uc*>(file.data()), static_cast<int>(file.size()), &w, &h,
                              &n) &&
        int64_t(w) * h > (1 << 20))
      return;
    minidl::data::decode_image(file, channels[static_cast<uint8_t>(bytes[0]) % 3], "fuzz.png");
  });
}
