// .npy reading and writing. The header is parsed by a small recursive-descent
// reader of the one dict shape np.save writes (string, bool and int-tuple
// values), not by a general Python-literal parser: anything else is refused
// with the byte offset where it stopped making sense.
#include "minidl/data/npy.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "minidl/core/atomic_file.h"
#include "minidl/core/check.h"
#include "minidl/core/shape.h"

namespace minidl::data {

// Data bytes are used as they are; a big-endian host would need swapping.
static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct DTypeInfo {
  NpyDType dtype;
  const char* descr;  // as np.save writes it
  size_t itemsize;
};
constexpr DTypeInfo kDTypes[] = {
    {NpyDType::Bool, "|b1", 1},    {NpyDType::UInt8, "|u1", 1},   {NpyDType::UInt16, "<u2", 2},
    {NpyDType::Int32, "<i4", 4},   {NpyDType::Int64, "<i8", 8},   {NpyDType::Float32, "<f4", 4},
    {NpyDType::Float64, "<f8", 8},
};

const DTypeInfo& info(NpyDType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d;
  MINIDL_ASSERT(false, "unknown NpyDType");
  return kDTypes[0];
}

std::string supported_list() {
  std::string s;
  for (const auto& d : kDTypes) s += (s.empty() ? "'" : ", '") + std::string(d.descr) + "'";
  return s;
}

// Printable view of raw bytes for messages: ASCII as is, the rest as \xNN.
std::string escaped(const uint8_t* p, size_t n) {
  std::string s;
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\') {
      s.push_back(static_cast<char>(p[i]));
    } else {
      s += "\\x";
      s.push_back(hex[p[i] >> 4]);
      s.push_back(hex[p[i] & 15]);
    }
  }
  return s;
}

// A shape as NumPy writes it: "(2, 3)", "(5,)", "()".
std::string tuple_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// Reads the header dict; every error names the file and an absolute offset.
class HeaderParser {
 public:
  HeaderParser(const uint8_t* bytes, size_t begin, size_t end, const std::string& name)
      : b_(bytes), pos_(begin), end_(end), name_(name) {}

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    MINIDL_FAIL("parse_npy: ", name_, ": at byte ", at, ": ", what);
  }

  void parse(NpyArray& out) {
    bool have_descr = false, have_order = false, have_shape = false;
    skip_ws();
    expect('{', "the header to start with '{'");
    for (;;) {
      skip_ws();
      if (peek() == '}') break;
      const size_t key_at = pos_;
      const std::string key = string_literal();
      skip_ws();
      expect(':', "':' after the key '" + key + "'");
      skip_ws();
      const size_t value_at = pos_;
      auto once = [&](bool& seen) {
        if (seen) fail(key_at, "the key '" + key + "' appears twice in the header");
        seen = true;
      };
      if (key == "descr") {
        once(have_descr);
        if (peek() == '[') fail(value_at, "structured dtypes are not supported (supported: " + supported_list() + ")");
        out.dtype = dtype_of(string_literal(), value_at);
      } else if (key == "fortran_order") {
        once(have_order);
        if (boolean())
          fail(value_at, "fortran_order True (column-major) arrays are not supported; "
                         "save a C-order array (np.ascontiguousarray(a))");
      } else if (key == "shape") {
        once(have_shape);
        out.shape = tuple();
      } else {
        fail(key_at, "unexpected key '" + key + "' in the header (expected 'descr', 'fortran_order', 'shape')");
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail(pos_, "expected ',' or '}' in the header dict, got " + shown());
    }
    const size_t close_at = pos_++;
    if (!have_descr) fail(close_at, "the header has no 'descr' key");
    if (!have_order) fail(close_at, "the header has no 'fortran_order' key");
    if (!have_shape) fail(close_at, "the header has no 'shape' key");
    skip_ws();
    if (pos_ != end_) fail(pos_, "unexpected " + shown() + " after the header dict");
  }

 private:
  int peek() const { return pos_ < end_ ? b_[pos_] : -1; }
  std::string shown() const {
    if (pos_ >= end_) return "the end of the header";
    std::string s = "'";  // appended, not operator+: GCC 12 warns falsely (-Wrestrict) on that
    s += escaped(b_ + pos_, 1);
    s += '\'';
    return s;
  }
  void skip_ws() {
    while (pos_ < end_ && (b_[pos_] == ' ' || b_[pos_] == '\t' || b_[pos_] == '\n' || b_[pos_] == '\r')) ++pos_;
  }
  void expect(char c, const std::string& what) {
    if (peek() != c) fail(pos_, "expected " + what + ", got " + shown());
    ++pos_;
  }
  std::string string_literal() {
    const int quote = peek();
    if (quote != '\'' && quote != '"') fail(pos_, "expected a quoted string, got " + shown());
    const size_t start = ++pos_;
    while (pos_ < end_ && b_[pos_] != quote) {
      if (b_[pos_] == '\\') fail(pos_, "escape sequences are not supported in header strings");
      ++pos_;
    }
    if (pos_ >= end_) fail(start - 1, "unterminated string in the header");
    return std::string(reinterpret_cast<const char*>(b_ + start), pos_++ - start);
  }
  bool word(const char* w) {
    const size_t n = std::strlen(w);
    if (end_ - pos_ < n || std::memcmp(b_ + pos_, w, n) != 0) return false;
    pos_ += n;
    return true;
  }
  bool boolean() {
    if (word("True")) return true;
    if (word("False")) return false;
    fail(pos_, "expected True or False, got " + shown());
  }
  int64_t integer() {
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < end_ && b_[pos_] >= '0' && b_[pos_] <= '9') {
      if (v > (int64_t{1} << 56)) fail(start, "dimension too large");
      v = v * 10 + (b_[pos_++] - '0');
    }
    if (pos_ == start) fail(pos_, "expected a non-negative integer dimension, got " + shown());
    if (peek() == 'L') ++pos_;  // Python 2 longs, still accepted by np.load
    return v;
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(', "a shape tuple starting with '('");
    for (;;) {
      skip_ws();
      if (peek() == ')') break;
      dims.push_back(integer());
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') fail(pos_, "expected ',' or ')' in the shape tuple, got " + shown());
    }
    ++pos_;
    return dims;
  }
  NpyDType dtype_of(const std::string& descr, size_t at) {
    for (const auto& d : kDTypes) {
      if (descr == d.descr) return d.dtype;
      // One-byte types have no byte order; '<u1' and '=u1' mean the same.
      if (d.itemsize == 1 && descr.size() == 3 && (descr[0] == '<' || descr[0] == '=') &&
          descr.substr(1) == std::string(d.descr).substr(1))
        return d.dtype;
    }
    if (!descr.empty() && descr[0] == '>')
      fail(at, "big-endian data ('" + descr + "') is not supported; save little-endian data (a.astype('<" +
                   descr.substr(1) + "'))");
    fail(at, "unsupported dtype '" + descr + "' (supported: " + supported_list() + ")");
  }

  const uint8_t* b_;
  size_t pos_, end_;
  const std::string& name_;
};

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

const char* npy_descr(NpyDType dtype) { return info(dtype).descr; }
size_t npy_itemsize(NpyDType dtype) { return info(dtype).itemsize; }

int64_t NpyArray::numel() const { return numel_of(shape); }

namespace {

// Checks the whole file (header and data size); fills out's dtype and shape
// and returns where the data starts.
size_t parse_header(const uint8_t* b, size_t size, const std::string& name, NpyArray& out) {
  auto fail = [&](size_t at, const auto&... what) -> void {
    MINIDL_FAIL("parse_npy: ", name, ": at byte ", at, ": ", what...);
  };
  if (size < kMagicLen || std::memcmp(b, kMagic, kMagicLen) != 0)
    fail(0, "not a .npy file: expected the magic string \\x93NUMPY, got \"",
         escaped(b, std::min(size, kMagicLen)), "\"", size < kMagicLen ? " (the file is shorter)" : "");
  if (size < kMagicLen + 2) fail(size, "truncated file: it ends inside the version bytes (bytes 6-7)");
  const int major = b[6], minor = b[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    fail(6, "unsupported .npy format version ", major, ".", minor, " (supported: 1.0, 2.0, 3.0)");
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t header_start = kMagicLen + 2 + static_cast<size_t>(len_bytes);
  if (size < header_start)
    fail(size, "truncated file: it ends inside the ", len_bytes, "-byte header length at byte 8");
  const uint64_t header_len = le(b + 8, len_bytes);
  if (header_len > size - header_start)
    fail(size, "truncated file: the header length at byte 8 says ", header_len, " bytes from byte ",
         header_start, ", but the file ends at byte ", size);
  const size_t data_start = header_start + static_cast<size_t>(header_len);

  HeaderParser(b, header_start, data_start, name).parse(out);

  // The running product in int64, as a Tensor counts it: (2^62, 4, 0) holds
  // no element but is refused (numel() and the tensor made from it would
  // overflow on the way to the 0).
  const std::optional<int64_t> nbytes = checked_nbytes(out.shape, npy_itemsize(out.dtype));
  if (!nbytes) fail(header_start, "the shape ", tuple_str(out.shape), " is too large (its size overflows int64)");
  const uint64_t need = static_cast<uint64_t>(*nbytes);
  const uint64_t have = size - data_start;
  const std::string what = std::string("shape ") + tuple_str(out.shape) + " of '" + npy_descr(out.dtype) + "'";
  if (have < need)
    fail(size, "truncated file: the ", what, " needs ", need, " data bytes from byte ", data_start,
         ", but the file ends at byte ", size, " (", have, " data bytes)");
  if (have > need)
    fail(data_start + need, "shape/size mismatch: the ", what, " needs ", need, " data bytes from byte ",
         data_start, ", but the file has ", have, " (", have - need, " extra bytes at the end)");
  return data_start;
}

void canonical_bools(NpyArray& a) {
  if (a.dtype == NpyDType::Bool)
    for (auto& v : a.data) v = v != 0;
}

}  // namespace

NpyArray parse_npy(const void* bytes, size_t size, const std::string& name) {
  const auto* b = static_cast<const uint8_t*>(bytes);
  NpyArray out;
  const size_t data_start = parse_header(b, size, name, out);
  out.data.assign(b + data_start, b + size);
  canonical_bools(out);
  return out;
}

NpyArray load_npy(const std::string& path) {
  std::error_code ec;
  MINIDL_CHECK(!std::filesystem::is_directory(path, ec), "load_npy: ", path, " is a directory, not a .npy file");
  std::ifstream in(path, std::ios::binary);
  MINIDL_CHECK(in.is_open(), "load_npy: cannot open ", path, ": ", std::strerror(errno));
  // One buffer for the whole file; the header is cut off in place, so a
  // large volume is not held twice.
  std::vector<uint8_t> bytes;
  const auto file_size = std::filesystem::file_size(path, ec);
  if (!ec) bytes.reserve(static_cast<size_t>(file_size));
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0)
    bytes.insert(bytes.end(), chunk, chunk + in.gcount());
  MINIDL_CHECK(!in.bad(), "load_npy: reading ", path, " failed");
  NpyArray out;
  const size_t data_start = parse_header(bytes.data(), bytes.size(), path, out);
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(data_start));
  out.data = std::move(bytes);
  canonical_bools(out);
  return out;
}

namespace {

// An NpyArray built by hand: its data must hold exactly its shape's bytes.
void check_array(const NpyArray& array, const char* op) {
  for (int64_t d : array.shape) MINIDL_CHECK(d >= 0, op, ": negative dimension in shape ", tuple_str(array.shape));
  const std::optional<int64_t> nbytes = checked_nbytes(array.shape, npy_itemsize(array.dtype));
  MINIDL_CHECK(nbytes.has_value(), op, ": the shape ", tuple_str(array.shape), " is too large (its size overflows int64)");
  MINIDL_CHECK(array.data.size() == static_cast<size_t>(*nbytes), op, ": the ", tuple_str(array.shape), " '",
               npy_descr(array.dtype), "' array needs ", *nbytes, " data bytes, got ", array.data.size());
}

}  // namespace

std::string format_npy(const NpyArray& array) {
  check_array(array, "save_npy");
  // np.save's layout: dict keys sorted, the header padded with spaces so the
  // data starts 64-byte aligned, a final '\n'.
  std::string dict = std::string("{'descr': '") + npy_descr(array.dtype) +
                     "', 'fortran_order': False, 'shape': " + tuple_str(array.shape) + ", }";
  int major = 1;
  size_t prefix = kMagicLen + 2 + 2;
  if (prefix + dict.size() + 1 > 65535) {
    major = 2;
    prefix += 2;
  }
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const uint64_t len = dict.size();
  for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xFF));
  out += dict;
  out.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  return out;
}

void save_npy(const std::string& path, const NpyArray& array) {
  write_file_atomically(path, {format_npy(array)}, "save_npy");
}

void save_npy(const std::string& path, const Tensor& tensor) { save_npy(path, tensor_to_npy(tensor)); }

NpyArray tensor_to_npy(const Tensor& tensor) {
  MINIDL_CHECK(tensor.defined(), "save_npy: expected a defined tensor");
  NpyArray out;
  switch (tensor.dtype()) {
    case kFloat32: out.dtype = NpyDType::Float32; break;
    case kFloat64: out.dtype = NpyDType::Float64; break;
    case kInt64: out.dtype = NpyDType::Int64; break;
    case kUInt8: out.dtype = NpyDType::UInt8; break;
    default:
      MINIDL_FAIL("save_npy: expected a float32, float64, int64 or uint8 tensor, got ", dtype_name(tensor.dtype()),
                  " (convert with .to(kFloat32))");
  }
  const Tensor cpu = tensor.to(kCPU).contiguous();
  out.shape.assign(cpu.shape().begin(), cpu.shape().end());
  const auto* p = static_cast<const uint8_t*>(cpu.raw_data());
  out.data.assign(p, p + cpu.nbytes());
  return out;
}

Tensor npy_to_tensor(const NpyArray& array) {
  check_array(array, "npy_to_tensor");  // from_buffer below reads numel() * itemsize bytes
  const Shape shape(array.shape.begin(), array.shape.end());
  const int64_t n = array.numel();
  switch (array.dtype) {
    case NpyDType::Bool:
    case NpyDType::UInt8: return from_buffer(array.data.data(), shape, kUInt8);
    case NpyDType::Int64: return from_buffer(array.data.data(), shape, kInt64);
    case NpyDType::Float32: return from_buffer(array.data.data(), shape, kFloat32);
    case NpyDType::Float64: return from_buffer(array.data.data(), shape, kFloat64);
    case NpyDType::UInt16:
    case NpyDType::Int32: {
      Tensor out = empty(shape, kInt64);
      int64_t* dst = out.data_ptr<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t* p = array.data.data() + i * static_cast<int64_t>(npy_itemsize(array.dtype));
        if (array.dtype == NpyDType::UInt16) {
          uint16_t v;
          std::memcpy(&v, p, 2);
          dst[i] = v;
        } else {
          int32_t v;
          std::memcpy(&v, p, 4);
          dst[i] = v;
        }
      }
      return out;
    }
  }
  MINIDL_ASSERT(false, "unknown NpyDType");
  return Tensor();
}

}  // namespace minidl::data
