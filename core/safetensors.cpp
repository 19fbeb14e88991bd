// safetensors reading and writing. The header is parsed with nlohmann/json;
// every check of the loader names the file and the byte offset that is wrong,
// since a corrupt checkpoint is usually found long after it was written.
#include "minidl/core/safetensors.h"

#include "minidl/core/atomic_file.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

namespace minidl {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; big-endian hosts would need byte swaps");

namespace {

using json = nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";

bool parse_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", kFloat32}, {"F64", kFloat64}, {"I64", kInt64},
      {"U8", kUInt8},    {"F16", kFloat16}, {"BF16", kBFloat16}};
  for (const auto& [name, dtype] : table) {
    if (s == name) {
      *out = dtype;
      return true;
    }
  }
  return false;
}

// ---- reading -------------------------------------------------------------

// Reads byte ranges of a file, or of bytes already in memory (the fuzz
// target, tests); either way the errors name `path`.
struct Reader {
  std::string path;
  std::ifstream in;
  std::string_view memory;  // used when `in` is not open
  uint64_t file_size = 0;

  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    MINIDL_FAIL("load_safetensors: ", path, ": ", parts...);
  }

  void read_at(uint64_t offset, char* dst, uint64_t n) {
    if (!in.is_open()) {
      if (offset > memory.size() || n > memory.size() - offset)
        fail("read of ", n, " bytes at byte offset ", offset, " failed (file size ", file_size, ")");
      if (n > 0) std::memcpy(dst, memory.data() + offset, n);
      return;
    }
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(dst, static_cast<std::streamsize>(n));
    if (!in || static_cast<uint64_t>(in.gcount()) != n)
      fail("read of ", n, " bytes at byte offset ", offset, " failed (file size ", file_size, ")");
  }
};

SafetensorsFile parse(Reader& r);

// Where the header mentions `"name":`, for pointing errors at a tensor's entry.
uint64_t key_offset_in_header(const std::string& header, const std::string& name) {
  const std::string quoted = json(name).dump();
  for (size_t pos = header.find(quoted); pos != std::string::npos; pos = header.find(quoted, pos + 1)) {
    size_t after = pos + quoted.size();
    while (after < header.size() && std::isspace(static_cast<unsigned char>(header[after]))) ++after;
    if (after < header.size() && header[after] == ':') return 8 + pos;
  }
  return 8;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

}  // namespace

// ---- public API ------------------------------------------------------------

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Int64: return "I64";
    case DType::UInt8: return "U8";
    case DType::Float16: return "F16";
    case DType::BFloat16: return "BF16";
  }
  return "?";
}

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [key, t] : tensors)
    if (key == name) return t;
  MINIDL_FAIL("SafetensorsFile: no tensor named '", name, "' (the file has ", tensors.size(), " tensors)");
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Contiguous CPU copies, and the data layout: wider element types first
  // (stable, so same-dtype tensors keep their order), which keeps every
  // tensor aligned to its element size as the Python library does.
  std::set<std::string> names;
  std::vector<std::pair<std::string, Tensor>> cpu;
  cpu.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    MINIDL_CHECK(t.defined(), "save_safetensors: ", path, ": tensor '", name, "' is undefined");
    MINIDL_CHECK(name != kMetadataKey, "save_safetensors: ", path, ": '", kMetadataKey,
                 "' is reserved and cannot name a tensor");
    MINIDL_CHECK(names.insert(name).second, "save_safetensors: ", path, ": duplicate tensor name '",
                 name, "'");
    Tensor c = t.detach();
    if (!c.device().is_cpu()) c = c.to(kCPU);
    cpu.emplace_back(name, c.contiguous());
  }
  std::stable_sort(cpu.begin(), cpu.end(), [](const auto& a, const auto& b) {
    return element_size(a.second.dtype()) > element_size(b.second.dtype());
  });

  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : cpu) {
    const uint64_t n = t.nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // the one way dump() fails: a string that is not UTF-8
    MINIDL_FAIL("save_safetensors: ", path, ": tensor names and metadata must be valid UTF-8 (", e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t header_len = text.size();

  char len_bytes[8];
  std::memcpy(len_bytes, &header_len, 8);
  std::vector<std::string_view> pieces{{len_bytes, 8}, text};
  for (const auto& [name, t] : cpu) pieces.emplace_back(static_cast<const char*>(t.raw_data()), t.nbytes());
  write_file_atomically(path, pieces, "save_safetensors");
}

SafetensorsFile load_safetensors(const std::string& path) {
  Reader r{path, std::ifstream(path, std::ios::binary), {}, 0};
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) r.fail("is a directory, not a safetensors file");
  if (!r.in) {
    r.fail("cannot open for reading: ",
           std::filesystem::exists(path, ec) ? std::strerror(errno) : "no such file");
  }
  r.file_size = std::filesystem::file_size(path, ec);
  if (ec) r.fail("cannot get the file size: ", ec.message());
  return parse(r);
}

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& name) {
  Reader r{name, std::ifstream(), bytes, bytes.size()};
  return parse(r);
}

namespace {

SafetensorsFile parse(Reader& r) {
  if (r.file_size < 8)
    r.fail("file size ", r.file_size, " is too small for the 8-byte header length (byte offset 0)");
  uint64_t header_len = 0;
  char len_bytes[8];
  r.read_at(0, len_bytes, 8);
  std::memcpy(&header_len, len_bytes, 8);
  if (header_len > r.file_size - 8)
    r.fail("header length ", header_len, " (byte offset 0) runs beyond the file (byte offset 8 + ",
           header_len, " > file size ", r.file_size, ")");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = r.file_size - data_start;

  std::string text(header_len, '\0');
  r.read_at(8, text.data(), header_len);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::parse_error& e) {
    // nlohmann counts bytes from 1 at the byte after the last one read.
    const uint64_t at = 8 + (e.byte > 0 ? e.byte - 1 : 0);
    r.fail("invalid JSON header at byte offset ", at, ": ", e.what());
  } catch (const json::exception& e) {  // e.g. out_of_range: a number like 1e999999 (found by make fuzz)
    r.fail("invalid JSON header (byte offset 8): ", e.what());
  }
  if (!header.is_object()) r.fail("the header (byte offset 8) is not a JSON object");

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    const uint64_t at = key_offset_in_header(text, name);
    if (name == kMetadataKey) {
      if (!value.is_object()) r.fail("'", kMetadataKey, "' at byte offset ", at, " is not a JSON object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          r.fail("metadata '", k, "' at byte offset ", at, " is not a string: ", v.dump());
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string& tensor = name;  // clang 14 cannot capture structured bindings
    auto bad = [&](const auto&... what) {
      r.fail("tensor '", tensor, "' at byte offset ", at, ": ", what...);
    };
    if (!value.is_object()) bad("expected an object with dtype, shape and data_offsets, got ", value.dump());
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!value.contains(field)) bad("missing \"", field, "\"");
    Entry e{tensor, kFloat32, {}, 0, 0};
    const json& dtype = value["dtype"];
    if (!dtype.is_string() || !parse_dtype(dtype.get<std::string>(), &e.dtype))
      bad("unknown dtype ", dtype.dump(), " (minidl reads F32, F64, I64, U8, F16, BF16)");
    const json& shape = value["shape"];
    if (!shape.is_array()) bad("shape is not an array: ", shape.dump());
    uint64_t nbytes = element_size(e.dtype);
    int64_t extent = 1;  // product of the non-zero sizes: the strides must fit in int64 too
    for (const json& d : shape) {
      if (!d.is_number_unsigned()) bad("shape ", shape.dump(), " holds ", d.dump(), ", not a size");
      const uint64_t size = d.get<uint64_t>();
      if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(nbytes, size, &nbytes) ||
          __builtin_mul_overflow(extent, std::max<int64_t>(1, static_cast<int64_t>(size)), &extent))
        bad("shape ", shape.dump(), " is too large");
      e.shape.push_back(static_cast<int64_t>(size));
    }
    // As empty() counts it (the running product, so a 0 dim after huge ones
    // does not help): refused here, where the error can name the file.
    if (!checked_nbytes(e.shape, element_size(e.dtype)))
      bad("shape ", shape.dump(), " is too large (Storage size calculation overflowed)");
    const json& offs = value["data_offsets"];
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
        !offs[1].is_number_unsigned())
      bad("data_offsets must be two non-negative integers, got ", offs.dump());
    e.begin = offs[0].get<uint64_t>();
    e.end = offs[1].get<uint64_t>();
    const std::string where = "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin > e.end) bad(where, " begin after end");
    if (e.end > data_size)
      bad(where, " end beyond the data section (byte offset 8 + ", header_len, " + ", e.end, " = ",
          data_start + e.end, " > file size ", r.file_size, ")");
    if (e.end - e.begin != nbytes)
      bad(where, " span ", e.end - e.begin, " bytes but dtype ", dtype.get<std::string>(), " and shape ",
          shape.dump(), " need ", nbytes, " bytes (data at byte offset ", data_start + e.begin, ")");
    entries.push_back(std::move(e));
  }

  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < entries.size(); ++i) {
    const Entry& prev = entries[i - 1];
    const Entry& cur = entries[i];
    if (cur.begin < prev.end)
      r.fail("tensor '", cur.name, "' data_offsets [", cur.begin, ", ", cur.end, "] overlap tensor '",
             prev.name, "' [", prev.begin, ", ", prev.end, "] (byte offset ", data_start + cur.begin, ")");
  }

  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, TensorOptions(e.dtype));
    if (e.end > e.begin) r.read_at(data_start + e.begin, static_cast<char*>(t.raw_data()), e.end - e.begin);
    file.tensors.emplace_back(e.name, std::move(t));
  }
  return file;
}

}  // namespace

}  // namespace minidl
