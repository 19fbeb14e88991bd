// IDX reader: a big-endian header (magic, then one uint32 size per dim) and
// the raw bytes. Magic numbers, the byte count implied by the header, the
// label range and the image/label counts are all checked; errors name the
// file and the byte offset (in the decompressed stream) where it went wrong.
#include "minidl/data/fashion_mnist.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "minidl/core/check.h"

namespace minidl::data {

namespace {

std::vector<uint8_t> read_gz(const std::string& path) {
  std::error_code ec;
  MINIDL_CHECK(!std::filesystem::is_directory(path, ec), "FashionMNIST: ", path,
               " is a directory, expected an IDX file (.gz)");
  gzFile file = gzopen(path.c_str(), "rb");
  MINIDL_CHECK(file != nullptr, "FashionMNIST: cannot open ", path, ": ", std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  for (;;) {
    const int got = gzread(file, chunk, sizeof(chunk));
    if (got < 0) {
      int code = 0;
      const std::string reason = gzerror(file, &code);
      gzclose(file);
      MINIDL_FAIL("FashionMNIST: ", path, ": cannot decompress after byte offset ", bytes.size(), ": ", reason);
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), chunk, chunk + got);
  }
  gzclose(file);
  return bytes;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t offset) {
  return (uint32_t(b[offset]) << 24) | (uint32_t(b[offset + 1]) << 16) | (uint32_t(b[offset + 2]) << 8) |
         uint32_t(b[offset + 3]);
}

// Checks the header (magic + `dims` sizes) and the payload length; returns the sizes.
std::vector<int64_t> read_header(const std::vector<uint8_t>& b, const std::string& path, uint32_t magic,
                                 size_t dims, const char* kind) {
  const size_t header = 4 * (1 + dims);
  MINIDL_CHECK(b.size() >= header, "FashionMNIST: ", path, ": the ", header, "-byte IDX ", kind,
               " header is truncated: the decompressed file ends at byte offset ", b.size());
  MINIDL_CHECK(be32(b, 0) == magic, "FashionMNIST: ", path, ": bad magic number ", be32(b, 0),
               " at byte offset 0 (expected ", magic, " for an IDX ", kind, " file)");
  std::vector<int64_t> sizes;
  int64_t payload = 1;
  for (size_t d = 0; d < dims; ++d) {
    sizes.push_back(be32(b, 4 * (1 + d)));
    MINIDL_CHECK(!__builtin_mul_overflow(payload, sizes.back(), &payload), "FashionMNIST: ", path,
                 ": the header sizes at byte offset 4 overflow");
  }
  const auto expected = static_cast<int64_t>(header) + payload;
  MINIDL_CHECK(static_cast<int64_t>(b.size()) == expected, "FashionMNIST: ", path, ": the header promises ",
               payload, " bytes of data after byte offset ", header, " (", expected,
               " bytes in all), but the decompressed file has ", b.size(), " bytes");
  return sizes;
}

}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, bool train)
    : FashionMNIST((std::filesystem::path(root) / (train ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz")).string(),
                   (std::filesystem::path(root) / (train ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz")).string()) {}

FashionMNIST::FashionMNIST(const std::string& images_file, const std::string& labels_file) {
  const auto images = read_gz(images_file);
  const auto isz = read_header(images, images_file, kImagesMagic, 3, "image");
  const auto labels = read_gz(labels_file);
  const auto lsz = read_header(labels, labels_file, kLabelsMagic, 1, "label");
  MINIDL_CHECK(isz[0] == lsz[0], "FashionMNIST: ", images_file, " holds ", isz[0], " images but ", labels_file,
               " holds ", lsz[0], " labels");

  images_ = from_buffer(images.data() + 16, {isz[0], 1, isz[1], isz[2]}, kUInt8);
  labels_.resize(static_cast<size_t>(lsz[0]));
  for (size_t i = 0; i < labels_.size(); ++i) {
    const uint8_t label = labels[8 + i];
    MINIDL_CHECK(label <= 9, "FashionMNIST: ", labels_file, ": label ", int(label), " at byte offset ", 8 + i,
                 " (item ", i, ") is not a class index 0-9");
    labels_[i] = label;
  }
  classes_ = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
}

}  // namespace minidl::data
