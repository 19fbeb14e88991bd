// TensorBoardWriter::add_image: the event file is read back here with an
// independent TFRecord/protobuf reader (bitwise CRC32C), and each PNG is
// decoded with stb_image and compared pixel for pixel with what was logged.
// scripts/check_tensorboard_images.py does the same with the tensorboard
// package itself (not at test time).
#include <stb/stb_image.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "examples/common/tensorboard.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace minidl;
using examples::TensorBoardWriter;

namespace {

uint32_t masked_crc32c_bitwise(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  crc = ~crc;
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint64_t le(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[pos + i])) << (8 * i);
  return v;
}

// The TFRecords of a file, each frame's two CRCs checked.
std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < file.size()) {
    REQUIRE(pos + 12 <= file.size());
    const uint64_t n = le(file, pos, 8);
    CHECK(le(file, pos + 8, 4) == masked_crc32c_bitwise(file.substr(pos, 8)));
    REQUIRE(pos + 12 + n + 4 <= file.size());
    const std::string data = file.substr(pos + 12, n);
    CHECK(le(file, pos + 12 + n, 4) == masked_crc32c_bitwise(data));
    records.push_back(data);
    pos += 12 + n + 4;
  }
  return records;
}

// Protobuf fields of one message: number -> (varint value or bytes).
struct Fields {
  std::map<uint32_t, uint64_t> num;
  std::map<uint32_t, std::string> bytes;
};

Fields parse(const std::string& s) {
  Fields f;
  size_t pos = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(pos < s.size());
      const auto b = static_cast<unsigned char>(s[pos++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (pos < s.size()) {
    const uint64_t key = varint();
    const auto field = static_cast<uint32_t>(key >> 3);
    switch (key & 7) {
      case 0: f.num[field] = varint(); break;
      case 1: f.num[field] = le(s, pos, 8), pos += 8; break;
      case 5: f.num[field] = le(s, pos, 4), pos += 4; break;
      case 2: {
        const uint64_t n = varint();
        REQUIRE(pos + n <= s.size());
        f.bytes[field] = s.substr(pos, n);
        pos += n;
        break;
      }
      default: FAIL("unexpected wire type ", key & 7);
    }
  }
  return f;
}

struct LoggedImage {
  std::string tag;
  int64_t step, height, width, colorspace;
  std::vector<uint8_t> pixels;  // decoded PNG, HWC
  int channels_in_png;
};

LoggedImage decode(const std::string& record) {
  const Fields event = parse(record);
  const Fields value = parse(parse(event.bytes.at(5)).bytes.at(1));
  const Fields image = parse(value.bytes.at(4));
  LoggedImage out{value.bytes.at(1), static_cast<int64_t>(event.num.at(2)), static_cast<int64_t>(image.num.at(1)),
                  static_cast<int64_t>(image.num.at(2)), static_cast<int64_t>(image.num.at(3)), {}, 0};
  const std::string& png = image.bytes.at(4);
  REQUIRE(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  int w = 0, h = 0;
  uint8_t* p = stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(png.data()), static_cast<int>(png.size()), &w,
                                     &h, &out.channels_in_png, 0);
  REQUIRE(p != nullptr);
  CHECK(w == out.width);
  CHECK(h == out.height);
  out.pixels.assign(p, p + static_cast<size_t>(w) * h * out.channels_in_png);
  stbi_image_free(p);
  return out;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("minidl_test_tb_image_" + std::to_string(getpid()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

// CHW uint8 -> HWC, the order a PNG stores.
std::vector<uint8_t> hwc(const Tensor& chw) {
  const int64_t c = chw.size(0), plane = chw.size(1) * chw.size(2);
  const std::vector<uint8_t> v = chw.to_vector<uint8_t>();
  std::vector<uint8_t> out(v.size());
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t p = 0; p < plane; ++p) out[static_cast<size_t>(p * c + ch)] = v[static_cast<size_t>(ch * plane + p)];
  return out;
}

}  // namespace

TEST_CASE("add_image: grey, RGB, RGBA and float images come back from the PNG pixel for pixel") {
  TempDir dir;
  const Tensor grey = (arange(5 * 7, TensorOptions(kFloat64)) * 7.0).reshape({5, 7}).to(kUInt8);
  const Tensor rgb = (arange(3 * 4 * 6, TensorOptions(kFloat64)) * 3.0).reshape({3, 4, 6}).to(kUInt8);
  const Tensor rgba = (arange(4 * 2 * 3, TensorOptions(kFloat64)) * 10.0).reshape({4, 2, 3}).to(kUInt8);
  // Float images are in [0, 1]: scaled by 255 and rounded; outside values
  // clamp, NaN becomes 0.
  Tensor f = tensor({0.0, 0.5, 1.0, -0.3, 1.7, std::nan(""), 0.2, 0.004}, {1, 2, 4}, kFloat32);
  std::string path;
  {
    TensorBoardWriter w(dir.path.string());
    path = w.path();
    w.add_image("grey", grey, 3);
    w.add_scalar("loss", 0.5, 3);
    w.add_image("rgb", rgb, 4);
    w.add_image("rgba", rgba, 5);
    w.add_image("float", f, 6);
    w.add_image("float64", f.to(kFloat64)[0], 7);
  }
  const std::vector<std::string> records = read_records(path);
  REQUIRE(records.size() == 7);  // file_version, 5 images, 1 scalar

  const LoggedImage g = decode(records[1]);
  CHECK(g.tag == "grey");
  CHECK(g.step == 3);
  CHECK(g.height == 5);
  CHECK(g.width == 7);
  CHECK(g.colorspace == 1);
  CHECK(g.channels_in_png == 1);
  CHECK(g.pixels == grey.to_vector<uint8_t>());

  const LoggedImage c = decode(records[3]);
  CHECK(c.tag == "rgb");
  CHECK(c.colorspace == 3);
  CHECK(c.channels_in_png == 3);
  CHECK(c.height == 4);
  CHECK(c.width == 6);
  CHECK(c.pixels == hwc(rgb));

  const LoggedImage a = decode(records[4]);
  CHECK(a.colorspace == 4);
  CHECK(a.pixels == hwc(rgba));

  const std::vector<uint8_t> want_f{0, 128, 255, 0, 255, 0, 51, 1};
  const LoggedImage fl = decode(records[5]);
  CHECK(fl.colorspace == 1);
  CHECK(fl.pixels == want_f);
  const LoggedImage fl64 = decode(records[6]);
  CHECK(fl64.step == 7);
  CHECK(fl64.pixels == want_f);
}

TEST_CASE("add_image: shapes, channel counts and dtypes it cannot log are refused") {
  TempDir dir;
  TensorBoardWriter w(dir.path.string());
  CHECK_THROWS_CONTAINS(w.add_image("x", zeros({2, 4, 4}, kUInt8), 0), "expected 1, 3 or 4 channels (C, H, W), got 2");
  CHECK_THROWS_CONTAINS(w.add_image("x", zeros({1, 1, 4, 4}, kUInt8), 0),
                        "expected an (H, W) or (C, H, W) image, got a 4-D tensor");
  CHECK_THROWS_CONTAINS(w.add_image("x", zeros({4, 4}, kInt64), 0), "expected a uint8, float32 or float64 image, got");
  CHECK_THROWS_CONTAINS(w.add_image("x", zeros({0, 4}, kUInt8), 0), "unsupported image size 0x4");
  CHECK_THROWS_CONTAINS(w.add_image("x", Tensor(), 0), "expected a defined tensor");
  const uint8_t px[4] = {1, 2, 3, 4};
  CHECK_THROWS_CONTAINS(w.add_image("x", px, 1, 2, 2, 0), "expected 1, 3 or 4 channels, got 2");
}
