// TensorBoard event files by hand. An event file is a TFRecord stream:
//   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
// (all little-endian), where each data is a serialized tensorflow.Event:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2", which TensorBoard
// uses to recognise the format. The protobuf encoding is done here directly:
// varint keys (field << 3 | wire type), fixed64/fixed32 for double/float.
#include "examples/common/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "minidl/core/check.h"

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
  std::string summary;
  put_bytes_field(summary, 1, summary_value);

  std::string event;
  put_double_field(event, 1, unix_seconds());
  put_int64_field(event, 2, step);
  put_bytes_field(event, 5, summary);
  write_record(event);
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
