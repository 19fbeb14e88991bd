// TensorBoard event files by hand. An event file is a TFRecord stream:
//   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
// (all little-endian), where each data is a serialized tensorflow.Event:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; Image image = 4; }
//   Image   { int32 height = 1; int32 width = 2; int32 colorspace = 3;
//             bytes encoded_image_string = 4; }   (PNG; colorspace = channels)
// The first record carries file_version "brain.Event:2", which TensorBoard
// uses to recognise the format. The protobuf encoding is done here directly:
// varint keys (field << 3 | wire type), fixed64/fixed32 for double/float.
#include "examples/common/tensorboard.h"

#include <stb/stb_image_write.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "minidl/core/check.h"
#include "minidl/core/device.h"

namespace minidl::examples {
namespace {

// Reflected CRC32C table (polynomial 0x1EDC6F41, reversed 0x82F63B78).
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Little-endian appenders, independent of the host byte order.
void put_fixed32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_fixed64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_key(std::string& s, uint32_t field, WireType type) { put_varint(s, (field << 3) | type); }
void put_bytes_field(std::string& s, uint32_t field, const std::string& bytes) {
  put_key(s, field, kLengthDelimited);
  put_varint(s, bytes.size());
  s += bytes;
}
void put_double_field(std::string& s, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(s, field, kFixed64);
  put_fixed64(s, bits);
}
void put_float_field(std::string& s, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(s, field, kFixed32);
  put_fixed32(s, bits);
}
void put_int64_field(std::string& s, uint32_t field, int64_t v) {
  put_key(s, field, kVarint);
  put_varint(s, static_cast<uint64_t>(v));  // int64 negatives are 10-byte varints
}

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir) {
  MINIDL_CHECK(!log_dir.empty(), "TensorBoardWriter: expected a log directory, got an empty path");
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  MINIDL_CHECK(!ec, "TensorBoardWriter: cannot create log directory '", log_dir,
               "': ", ec.message());
  auto secs = static_cast<long long>(unix_seconds());
  path_ = (std::filesystem::path(log_dir) /
           ("events.out.tfevents." + std::to_string(secs) + "." + hostname() + "." +
            std::to_string(static_cast<long long>(getpid()))))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  MINIDL_CHECK(out_.is_open(), "TensorBoardWriter: cannot open '", path_, "' for writing");

  std::string event;
  put_double_field(event, 1, unix_seconds());
  put_int64_field(event, 2, 0);
  put_bytes_field(event, 3, "brain.Event:2");
  write_record(event);
  flush();
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  std::string summary_value;
  put_bytes_field(summary_value, 1, tag);
  put_float_field(summary_value, 2, static_cast<float>(value));
  write_summary_value(summary_value, step);
}

// Event{wall_time = 1, step = 2, summary = 5 { value = 1 }}: one record.
void TensorBoardWriter::write_summary_value(const std::string& summary_value, int64_t step) {
  std::string summary;
  put_bytes_field(summary, 1, summary_value);
  std::string event;
  put_double_field(event, 1, unix_seconds());
  put_int64_field(event, 2, step);
  put_bytes_field(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::add_image(const std::string& tag, const uint8_t* hwc, int height, int width,
                                  int channels, int64_t step) {
  MINIDL_CHECK(height > 0 && width > 0, "add_image: expected a non-empty image, got ", height, "x", width);
  MINIDL_CHECK(channels == 1 || channels == 3 || channels == 4,
               "add_image: expected 1, 3 or 4 channels, got ", channels);
  // The tensor overload's limit; also keeps width * channels (stb's row stride) within int.
  MINIDL_CHECK(int64_t{height} * width <= (int64_t{1} << 28), "add_image: unsupported image size ", height, "x", width);
  MINIDL_CHECK(hwc != nullptr, "add_image: expected pixels for the ", height, "x", width, " image '", tag,
               "', got a null pointer");
  std::string png;
  auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
  };
  const int ok = stbi_write_png_to_func(append, &png, width, height, channels, hwc, width * channels);
  MINIDL_CHECK(ok != 0 && !png.empty(), "add_image: PNG encoding of the ", height, "x", width, " image '", tag,
               "' failed");

  std::string image;
  put_int64_field(image, 1, height);
  put_int64_field(image, 2, width);
  put_int64_field(image, 3, channels);
  put_bytes_field(image, 4, png);
  std::string summary_value;
  put_bytes_field(summary_value, 1, tag);
  put_bytes_field(summary_value, 4, image);
  write_summary_value(summary_value, step);
}

void TensorBoardWriter::add_image(const std::string& tag, const Tensor& image, int64_t step) {
  MINIDL_CHECK(image.defined(), "add_image: expected a defined tensor");
  MINIDL_CHECK(image.dim() == 2 || image.dim() == 3, "add_image: expected an (H, W) or (C, H, W) image, got a ",
               image.dim(), "-D tensor");
  const DType dt = image.dtype();
  MINIDL_CHECK(dt == kUInt8 || dt == kFloat32 || dt == kFloat64,
               "add_image: expected a uint8, float32 or float64 image, got ", dtype_name(dt));
  const int64_t c = image.dim() == 3 ? image.size(0) : 1;
  const int64_t h = image.size(image.dim() - 2), w = image.size(image.dim() - 1);
  MINIDL_CHECK(c == 1 || c == 3 || c == 4, "add_image: expected 1, 3 or 4 channels (C, H, W), got ", c);
  MINIDL_CHECK(h > 0 && w > 0 && h * w <= (int64_t{1} << 28), "add_image: unsupported image size ", h, "x", w);
  // The user asked for these pixels on the host: one copy, then CHW -> HWC.
  const Tensor host = image.to(kCPU).contiguous();
  std::vector<uint8_t> hwc(static_cast<size_t>(c * h * w));
  const int64_t plane = h * w;
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t p = 0; p < plane; ++p) {
      uint8_t v;
      if (dt == kUInt8) {
        v = host.data_ptr<uint8_t>()[ch * plane + p];
      } else {
        const double x = dt == kFloat32 ? host.data_ptr<float>()[ch * plane + p] : host.data_ptr<double>()[ch * plane + p];
        v = std::isnan(x) ? 0 : static_cast<uint8_t>(std::lround(std::clamp(x, 0.0, 1.0) * 255.0));
      }
      hwc[static_cast<size_t>(p * c + ch)] = v;
    }
  add_image(tag, hwc.data(), static_cast<int>(h), static_cast<int>(w), static_cast<int>(c), step);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string header;
  put_fixed64(header, data.size());
  std::string record = header;
  put_fixed32(record, masked_crc32c(header.data(), header.size()));
  record += data;
  put_fixed32(record, masked_crc32c(data.data(), data.size()));
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  MINIDL_CHECK(out_.good(), "TensorBoardWriter: write to '", path_, "' failed");
}

void TensorBoardWriter::flush() {
  out_.flush();
  MINIDL_CHECK(out_.good(), "TensorBoardWriter: flush of '", path_, "' failed");
}

TensorBoardWriter::~TensorBoardWriter() { out_.flush(); }  // never throws

const std::string& TensorBoardWriter::path() const { return path_; }

}  // namespace minidl::examples
