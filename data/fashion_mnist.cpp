// IDX reader: a big-endian header (magic, then one uint32 size per dim) and
// the raw bytes. Magic numbers, the byte count implied by the header, the
// label range and the image/label counts are all checked; errors name the
// file and the byte offset (in the decompressed stream) where it went wrong.
#include "minidl/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "minidl/core/check.h"

namespace minidl::data {

namespace {

std::string read_file(const std::string& path) {
  std::error_code ec;
  MINIDL_CHECK(!std::filesystem::is_directory(path, ec), "FashionMNIST: ", path,
               " is a directory, expected an IDX file (.gz)");
  std::ifstream in(path, std::ios::binary);
  MINIDL_CHECK(in.good(), "FashionMNIST: cannot open ", path, ": ", std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MINIDL_CHECK(!in.bad(), "FashionMNIST: error reading ", path);
  return bytes;
}

bool is_gzip(std::string_view b) { return b.size() >= 2 && uint8_t(b[0]) == 0x1f && uint8_t(b[1]) == 0x8b; }

// The decompressed bytes of a gzip file (all its members, as gzread reads
// them), or the bytes themselves when they are not gzipped.
std::vector<uint8_t> gunzip(std::string_view in, const std::string& path) {
  if (!is_gzip(in)) return {in.begin(), in.end()};
  std::vector<uint8_t> out;
  z_stream zs{};
  MINIDL_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK, "FashionMNIST: ", path, ": zlib init failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size(), UINT32_MAX));
  uint8_t chunk[1 << 16];
  for (;;) {
    zs.next_out = chunk;
    zs.avail_out = sizeof(chunk);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.insert(out.end(), chunk, chunk + (sizeof(chunk) - zs.avail_out));
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow; anything else after a member is ignored, as gzread does.
      const std::string_view rest(reinterpret_cast<const char*>(zs.next_in), zs.avail_in);
      if (!is_gzip(rest)) break;
      inflateReset(&zs);
      continue;
    }
    if (rc != Z_OK) {
      const std::string reason = rc == Z_BUF_ERROR ? "unexpected end of file" : zs.msg ? zs.msg : "corrupt data";
      inflateEnd(&zs);
      MINIDL_FAIL("FashionMNIST: ", path, ": cannot decompress after byte offset ", out.size(), ": ", reason);
    }
  }
  inflateEnd(&zs);
  return out;
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
  int64_t payload = 1, extent = 1;  // extent: the product of the non-zero sizes (the strides)
  for (size_t d = 0; d < dims; ++d) {
    sizes.push_back(be32(b, 4 * (1 + d)));
    MINIDL_CHECK(!__builtin_mul_overflow(payload, sizes.back(), &payload) &&
                     !__builtin_mul_overflow(extent, std::max<int64_t>(1, sizes.back()), &extent),
                 "FashionMNIST: ", path, ": the header sizes at byte offset 4 overflow");
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
  const std::string images = read_file(images_file);
  const std::string labels = read_file(labels_file);
  decode(images, images_file, labels, labels_file);
}

FashionMNIST FashionMNIST::from_bytes(std::string_view images, const std::string& images_name,
                                      std::string_view labels, const std::string& labels_name) {
  FashionMNIST dataset;
  dataset.decode(images, images_name, labels, labels_name);
  return dataset;
}

void FashionMNIST::decode(std::string_view images_bytes, const std::string& images_file,
                          std::string_view labels_bytes, const std::string& labels_file) {
  const auto images = gunzip(images_bytes, images_file);
  const auto isz = read_header(images, images_file, kImagesMagic, 3, "image");
  const auto labels = gunzip(labels_bytes, labels_file);
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
