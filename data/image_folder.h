// ImageFolder: root/<class_name>/<image>.{png,jpg,jpeg,bmp,tga,gif} (extension
// case-insensitive). Classes are the sub-folders in sorted order; images are
// sorted by path within a class. Images are decoded in get() (so DataLoader
// workers decode in parallel) with stb_image into uint8 (channels, H, W).
//
// No resizing: every image must have the same height and width. The
// constructor reads each file's header (stbi_info) and refuses unreadable
// files (named, with stb's reason) and size mismatches, so get() only fails if
// a file changes on disk afterwards.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "minidl/data/dataset.h"

namespace minidl::data {

// Decodes one image file's bytes (PNG, JPEG, BMP, TGA, GIF: stb_image) into
// uint8 (channels, H, W); `name` stands for the file in error messages.
// Images of more than kMaxImageBytes / 4 pixels (64 Mpx, e.g. 8192 x 8192)
// are refused before decoding.
inline constexpr int64_t kMaxImageBytes = int64_t(256) << 20;
Tensor decode_image(std::string_view bytes, int channels, const std::string& name);

class ImageFolder : public Dataset {
 public:
  // channels: 1 (grey), 3 (RGB) or 4 (RGBA); images are converted to it.
  explicit ImageFolder(const std::string& root, int channels = 3);

  int64_t size() const override { return static_cast<int64_t>(paths_.size()); }
  Example get(int64_t index) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<std::string>& paths() const { return paths_; }
  const std::vector<int64_t>& labels() const { return labels_; }
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }

 private:
  int channels_;
  int64_t height_ = 0, width_ = 0;
  std::vector<std::string> classes_;
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
};

}  // namespace minidl::data
