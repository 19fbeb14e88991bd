// ImageFolder: scan once (sorted, so the index -> file mapping is
// reproducible), check headers up front, decode lazily.
#include "minidl/data/image_folder.h"

#include <stb/stb_image.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "minidl/core/check.h"
#include "minidl/data/image_check.h"

namespace minidl::data {

namespace fs = std::filesystem;

namespace {
// The first `limit` bytes of `path` (all of it by default).
std::string read_bytes(const std::string& path, size_t limit = SIZE_MAX) {
  std::ifstream in(path, std::ios::binary);
  MINIDL_CHECK(in.good(), "ImageFolder: cannot open image ", path, ": ", std::strerror(errno));
  std::string bytes;
  char chunk[1 << 16];
  while (bytes.size() < limit && in.read(chunk, std::min<size_t>(sizeof(chunk), limit - bytes.size())).gcount() > 0)
    bytes.append(chunk, static_cast<size_t>(in.gcount()));
  MINIDL_CHECK(!in.bad(), "ImageFolder: error reading image ", path);
  return bytes;
}

// stbi_info on the file's first 64 KiB, or all of it when the header is longer.
bool image_info(const std::string& path, int* w, int* h, int* n) {
  constexpr size_t kPrefix = 64 * 1024;
  auto info = [&](const std::string& bytes) {
    check_image_bytes(bytes, path, bytes.size() < kPrefix);
    return bytes.size() <= INT_MAX && stbi_info_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()),
                                                            static_cast<int>(bytes.size()), w, h, n);
  };
  const std::string prefix = read_bytes(path, kPrefix);
  if (info(prefix)) return true;
  return prefix.size() == kPrefix && info(read_bytes(path));
}

bool is_image(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp" || ext == ".tga" || ext == ".gif";
}
}  // namespace

ImageFolder::ImageFolder(const std::string& root, int channels) : channels_(channels) {
  MINIDL_CHECK(channels == 1 || channels == 3 || channels == 4,
               "ImageFolder: channels must be 1, 3 or 4, got ", channels);
  std::error_code ec;
  MINIDL_CHECK(fs::is_directory(root, ec), "ImageFolder: ", root, " is not a directory");
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  MINIDL_CHECK(!classes_.empty(), "ImageFolder: no class folders found in ", root);

  for (size_t c = 0; c < classes_.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(fs::path(root) / classes_[c])) {
      if (entry.is_regular_file() && is_image(entry.path())) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      int w = 0, h = 0, n = 0;
      MINIDL_CHECK(image_info(f, &w, &h, &n), "ImageFolder: cannot read image ", f, ": ",
                   stbi_failure_reason());
      if (paths_.empty()) {
        height_ = h;
        width_ = w;
      }
      MINIDL_CHECK(h == height_ && w == width_, "ImageFolder: ", f, " is ", h, "x", w, " (HxW) but ",
                   paths_.front(), " is ", height_, "x", width_,
                   "; ImageFolder does not resize, all images must have the same size");
      paths_.push_back(std::move(f));
      labels_.push_back(static_cast<int64_t>(c));
    }
  }
  MINIDL_CHECK(!paths_.empty(), "ImageFolder: no images (.png, .jpg, .jpeg, .bmp, .tga, .gif) found under ", root);
}

Tensor decode_image(std::string_view bytes, int channels, const std::string& name) {
  MINIDL_CHECK(channels == 1 || channels == 3 || channels == 4,
               "decode_image: channels must be 1, 3 or 4, got ", channels);
  MINIDL_CHECK(bytes.size() <= INT_MAX, "ImageFolder: ", name, " is too large (", bytes.size(), " bytes)");
  check_image_bytes(bytes, name, /*whole_file=*/true);
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int len = static_cast<int>(bytes.size());
  int w = 0, h = 0, n = 0;
  MINIDL_CHECK(stbi_info_from_memory(data, len, &w, &h, &n), "ImageFolder: cannot read image ", name, ": ",
               stbi_failure_reason());
  // 4 bytes a pixel whatever `channels` is: stb decodes to the file's own channels first.
  MINIDL_CHECK(w > 0 && h > 0 && int64_t(w) * h * 4 <= kMaxImageBytes, "ImageFolder: ", name, " is ", h, "x", w,
               " (HxW); images of more than ", kMaxImageBytes / 4, " pixels are refused");
  std::unique_ptr<uint8_t, void (*)(void*)> pixels(stbi_load_from_memory(data, len, &w, &h, &n, channels),
                                                   stbi_image_free);
  MINIDL_CHECK(pixels != nullptr, "ImageFolder: cannot decode image ", name, ": ", stbi_failure_reason());
  // stb gives HWC; the framework uses CHW.
  Tensor out = empty({channels, h, w}, kUInt8);
  uint8_t* dst = out.data_ptr<uint8_t>();
  const int64_t plane = int64_t(h) * w;
  for (int64_t p = 0; p < plane; ++p)
    for (int c = 0; c < channels; ++c) dst[c * plane + p] = pixels.get()[p * channels + c];
  return out;
}

Example ImageFolder::get(int64_t index) const {
  detail::check_index("ImageFolder", index, size());
  const std::string& path = paths_[static_cast<size_t>(index)];
  Tensor out = decode_image(read_bytes(path), channels_, path);
  MINIDL_CHECK(out.size(1) == height_ && out.size(2) == width_, "ImageFolder: ", path, " is now ", out.size(1),
               "x", out.size(2), ", expected ", height_, "x", width_);
  return {out, labels_[static_cast<size_t>(index)]};
}

}  // namespace minidl::data
