// Fashion-MNIST (and MNIST: same format) from gzipped IDX files:
// train-images-idx3-ubyte.gz / train-labels-idx1-ubyte.gz (60000) and
// t10k-images-idx3-ubyte.gz / t10k-labels-idx1-ubyte.gz (10000). Debian's
// dataset-fashion-mnist package installs them under
// /usr/share/datasets/fashion-mnist/. Images are kept as uint8 (N, 1, 28, 28);
// get() returns a uint8 (1, H, W) copy and the label. Uncompressed IDX files
// are read too (zlib passes them through).
#pragma once

#include <string>
#include <string_view>

#include "minidl/data/dataset.h"

namespace minidl::data {

class FashionMNIST : public InMemoryImageDataset {
 public:
  static constexpr uint32_t kImagesMagic = 2051;  // 0x00000803: ubyte, 3 dims
  static constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801: ubyte, 1 dim

  explicit FashionMNIST(const std::string& root, bool train = true);
  // An explicit pair of IDX files.
  FashionMNIST(const std::string& images_file, const std::string& labels_file);

  // The two files' bytes (gzipped or not) already in memory; the names stand
  // for the files in error messages.
  static FashionMNIST from_bytes(std::string_view images, const std::string& images_name, std::string_view labels,
                                 const std::string& labels_name);

 private:
  FashionMNIST() = default;
  void decode(std::string_view images, const std::string& images_name, std::string_view labels,
              const std::string& labels_name);
};

}  // namespace minidl::data
