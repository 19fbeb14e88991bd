// safetensors: round trips, the atomic write, every kind of corrupt file
// refused with the file name and byte offset, and a file written by Python.
#include "minidl/core/safetensors.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

using namespace minidl;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test case, removed at the end.
struct TempDir {
  fs::path dir;
  TempDir() {
    static int counter = 0;
    dir = fs::temp_directory_path() /
          ("minidl_safetensors_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// A file with `header` as its JSON header (length field correct) followed by `data_bytes` zero bytes.
std::string make_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

std::string load_error(const std::string& path) {
  try {
    load_safetensors(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The raw bytes of a contiguous CPU tensor.
std::string bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

}  // namespace

TEST_CASE("safetensors round trip: dtypes, 0-d, empty, non-contiguous, metadata") {
  TempDir tmp;
  const std::string path = tmp.file("model.safetensors");
  Tensor f32 = randn({2, 3});
  Tensor f64_scalar = scalar_tensor(-1.75, kFloat64);
  Tensor i64 = tensor(std::vector<int64_t>{-5, 0, 7, int64_t{1} << 50, -1});
  Tensor u8 = tensor(std::vector<uint8_t>{0, 1, 127, 128, 200, 254, 255}, {7});  // odd byte count
  Tensor empty_f32 = zeros({0, 4});
  Tensor transposed = arange(12.0).reshape({3, 4}).transpose(0, 1);  // not contiguous
  REQUIRE_FALSE(transposed.is_contiguous());
  Tensor f64_4d = randn({2, 1, 3, 2}, kFloat64);
  const uint16_t half_bits[3] = {0x3E00, 0xC000, 0x7BFF};
  Tensor f16 = from_buffer(half_bits, {3}, kFloat16);
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"epoch", "3"}, {"note", "caf\xc3\xa9 \"q\""}};

  std::vector<std::pair<std::string, Tensor>> in{{"u8", u8},           {"weight", f32},
                                                 {"scalar", f64_scalar}, {"ids", i64},
                                                 {"empty", empty_f32}, {"transposed", transposed},
                                                 {"f64_4d", f64_4d},   {"half", f16}};
  save_safetensors(path, in, meta);
  SafetensorsFile file = load_safetensors(path);

  CHECK(file.metadata == meta);
  REQUIRE(file.tensors.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO("tensor ", name);
    REQUIRE(file.contains(name));
    const Tensor& got = file.at(name);
    CHECK(got.dtype() == t.dtype());
    CHECK(got.shape() == t.shape());
    CHECK(got.is_contiguous());
    CHECK(bytes_of(got) == bytes_of(t));
  }
  CHECK(file.at("scalar").dim() == 0);
  CHECK(file.at("scalar").item<double>() == -1.75);
  CHECK(file.at("transposed").to_vector<float>() ==
        std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(file.at("ids").to_vector<int64_t>()[3] == int64_t{1} << 50);
  CHECK_THROWS_CONTAINS(file.at("nope"), "no tensor named 'nope'");

  // Every tensor's data is aligned to its element size within the data section.
  std::ifstream raw(path, std::ios::binary);
  char len[8];
  raw.read(len, 8);
  uint64_t header_len;
  std::memcpy(&header_len, len, 8);
  CHECK(header_len % 8 == 0);
}

TEST_CASE("safetensors: empty file list and metadata-free file") {
  TempDir tmp;
  const std::string path = tmp.file("empty.safetensors");
  save_safetensors(path, {});
  SafetensorsFile file = load_safetensors(path);
  CHECK(file.tensors.empty());
  CHECK(file.metadata.empty());
}

TEST_CASE("safetensors: the write is atomic (temporary file renamed, nothing left behind)") {
  TempDir tmp;
  const std::string path = tmp.file("ckpt.safetensors");
  save_safetensors(path, {{"a", ones({3})}});
  CHECK(tmp.listing() == std::vector<std::string>{"ckpt.safetensors"});

  // Overwriting replaces the file as a whole.
  save_safetensors(path, {{"b", full({2, 2}, 7.0)}});
  CHECK(tmp.listing() == std::vector<std::string>{"ckpt.safetensors"});
  SafetensorsFile file = load_safetensors(path);
  REQUIRE(file.tensors.size() == 1);
  CHECK(file.tensors[0].first == "b");

  // A save that fails leaves the previous file intact and no temporary behind.
  CHECK_THROWS_CONTAINS(save_safetensors(path, {{"x", ones({2})}, {"x", ones({2})}}),
                        "duplicate tensor name 'x'");
  CHECK_THROWS_CONTAINS(save_safetensors(path, {{"u", Tensor()}}), "tensor 'u' is undefined");
  CHECK_THROWS_CONTAINS(save_safetensors(path, {{"__metadata__", ones({1})}}), "reserved");
  // Names and metadata that are not UTF-8 (JSON's encoding): nlohmann's own exception, no file named, before.
  CHECK_THROWS_CONTAINS(save_safetensors(path, {{"w\xff", ones({1})}}),
                        "ckpt.safetensors: tensor names and metadata must be valid UTF-8");
  CHECK_THROWS_CONTAINS(save_safetensors(path, {{"w", ones({1})}}, {{"note", "\xfe"}}), "must be valid UTF-8");
  CHECK_THROWS_CONTAINS(save_safetensors("", {{"w", ones({1})}}), "save_safetensors: expected a file path, got an empty one");
  CHECK(tmp.listing() == std::vector<std::string>{"ckpt.safetensors"});
  CHECK(load_safetensors(path).at("b").to_vector<float>() == std::vector<float>{7, 7, 7, 7});

  // An unwritable place is reported with the path.
  const std::string bad = tmp.file("no/such/dir/x.safetensors");
  CHECK_THROWS_CONTAINS(save_safetensors(bad, {{"a", ones({1})}}), bad);
}

TEST_CASE("safetensors: corrupt files are refused with the file name and byte offset") {
  TempDir tmp;
  const std::string f32_entry = R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";

  SUBCASE("missing file") {
    const std::string path = tmp.file("missing.safetensors");
    const std::string msg = load_error(path);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("no such file") != std::string::npos);
  }
  SUBCASE("shorter than the length field") {
    const std::string path = tmp.file("short.safetensors");
    write_bytes(path, "abcde");
    CHECK_THROWS_CONTAINS(load_safetensors(path), path + ": file size 5 is too small for the 8-byte header length (byte offset 0)");
  }
  SUBCASE("header length beyond the file") {
    const std::string path = tmp.file("long_header.safetensors");
    write_bytes(path, le64(1000) + "{}");
    CHECK_THROWS_CONTAINS(load_safetensors(path),
                          path + ": header length 1000 (byte offset 0) runs beyond the file (byte offset 8 + 1000 > file size 10)");
  }
  SUBCASE("header length that would overflow") {
    const std::string path = tmp.file("huge_header.safetensors");
    write_bytes(path, le64(~uint64_t{0}) + "{}");
    CHECK_THROWS_CONTAINS(load_safetensors(path), "runs beyond the file");
  }
  SUBCASE("invalid JSON") {
    const std::string path = tmp.file("bad_json.safetensors");
    write_bytes(path, make_file(R"({"w": {"dtype": "F32",, })", 0));
    // The second comma is header byte 22, file byte 30.
    CHECK_THROWS_CONTAINS(load_safetensors(path), path + ": invalid JSON header at byte offset 30");
  }
  SUBCASE("header is not an object") {
    const std::string path = tmp.file("array.safetensors");
    write_bytes(path, make_file("[1, 2]", 0));
    CHECK_THROWS_CONTAINS(load_safetensors(path), path + ": the header (byte offset 8) is not a JSON object");
  }
  SUBCASE("unknown dtype") {
    const std::string path = tmp.file("dtype.safetensors");
    write_bytes(path, make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"C64","shape":[1],"data_offsets":[4,12]}})", 12));
    // "w" is at header byte 54, file byte 62.
    CHECK_THROWS_CONTAINS(load_safetensors(path), path + ": tensor 'w' at byte offset 62: unknown dtype \"C64\"");
  }
  SUBCASE("missing field") {
    const std::string path = tmp.file("field.safetensors");
    write_bytes(path, make_file(R"({"w":{"dtype":"F32","shape":[1]}})", 4));
    CHECK_THROWS_CONTAINS(load_safetensors(path), path + ": tensor 'w' at byte offset 9: missing \"data_offsets\"");
  }
  SUBCASE("negative or fractional size in the shape") {
    const std::string path = tmp.file("shape.safetensors");
    write_bytes(path, make_file(R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}})", 24));
    CHECK_THROWS_CONTAINS(load_safetensors(path), path + ": tensor 'w' at byte offset 9: shape [2,-3] holds -3, not a size");
    write_bytes(path, make_file(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,24]}})", 24));
    CHECK_THROWS_CONTAINS(load_safetensors(path), "holds 2.5, not a size");
  }
  SUBCASE("shape and data_offsets disagree") {
    const std::string path = tmp.file("mismatch.safetensors");
    const std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})";
    write_bytes(path, make_file(header, 20));
    CHECK_THROWS_CONTAINS(load_safetensors(path),
                          path + ": tensor 'w' at byte offset 9: data_offsets [0, 20] span 20 bytes but dtype F32 and shape [2,3] need 24 bytes (data at byte offset " +
                              std::to_string(8 + header.size()) + ")");
  }
  SUBCASE("data_offsets beyond the data section") {
    const std::string path = tmp.file("range.safetensors");
    const std::string header = "{" + f32_entry + "}";
    write_bytes(path, make_file(header, 16));
    const size_t n = header.size();
    CHECK_THROWS_CONTAINS(load_safetensors(path),
                          path + ": tensor 'w' at byte offset 9: data_offsets [0, 24] end beyond the data section (byte offset 8 + " +
                              std::to_string(n) + " + 24 = " + std::to_string(8 + n + 24) + " > file size " +
                              std::to_string(8 + n + 16) + ")");
  }
  SUBCASE("begin after end") {
    const std::string path = tmp.file("reversed.safetensors");
    write_bytes(path, make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8));
    CHECK_THROWS_CONTAINS(load_safetensors(path), path + ": tensor 'w' at byte offset 9: data_offsets [8, 4] begin after end");
  }
  SUBCASE("negative data_offsets") {
    const std::string path = tmp.file("negative.safetensors");
    write_bytes(path, make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 8));
    CHECK_THROWS_CONTAINS(load_safetensors(path), "data_offsets must be two non-negative integers, got [-4,0]");
  }
  SUBCASE("overlapping tensors") {
    const std::string path = tmp.file("overlap.safetensors");
    const std::string header =
        R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
    write_bytes(path, make_file(header, 24));
    CHECK_THROWS_CONTAINS(load_safetensors(path),
                          path + ": tensor 'b' data_offsets [8, 24] overlap tensor 'a' [0, 16] (byte offset " +
                              std::to_string(8 + header.size() + 8) + ")");
  }
  SUBCASE("metadata that is not string to string") {
    const std::string path = tmp.file("meta.safetensors");
    write_bytes(path, make_file(R"({"__metadata__":{"epoch":3}})", 0));
    CHECK_THROWS_CONTAINS(load_safetensors(path), path + ": metadata 'epoch' at byte offset 9 is not a string: 3");
  }
  SUBCASE("a valid file cut short") {
    const std::string path = tmp.file("cut.safetensors");
    save_safetensors(path, {{"w", ones({10})}});
    const auto size = fs::file_size(path);
    fs::resize_file(path, size - 3);
    const std::string msg = load_error(path);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("tensor 'w'") != std::string::npos);
    CHECK(msg.find("end beyond the data section") != std::string::npos);
    CHECK(msg.find("> file size " + std::to_string(size - 3)) != std::string::npos);
  }
}

TEST_CASE("safetensors: any single corrupted byte loads or throws minidl::Error, never crashes") {
  TempDir tmp;
  const std::string good = tmp.file("good.safetensors");
  save_safetensors(good, {{"w", arange(6.0).reshape({2, 3})}, {"n", tensor(std::vector<int64_t>{4, 5})}},
                   {{"k", "v"}});
  std::ifstream in(good, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int refused = 0;
  for (size_t pos = 0; pos < bytes.size(); ++pos) {
    for (const char value : {'\0', '9', '"', '\xff'}) {
      std::string corrupt = bytes;
      corrupt[pos] = value;
      // A new file each time: truncating one in place makes ext4 flush it on close, which is slow.
      const std::string path = tmp.file("fuzzed_" + std::to_string(pos) + "_" + std::to_string(int(value)));
      write_bytes(path, corrupt);
      try {
        load_safetensors(path);
      } catch (const Error& e) {
        ++refused;
        CHECK_MESSAGE(std::string(e.what()).find(path) != std::string::npos, e.what());
      }
      fs::remove(path);
    }
  }
  CHECK(refused > 0);
}

TEST_CASE("safetensors: reads a file written by Python's safetensors") {
  // scripts/make_goldens.py wrote it with safetensors.torch.save_file.
  const std::string path = std::string(MINIDL_GOLDENS_DIR) + "/safetensors_dtypes.safetensors";
  SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(file.tensors.size() == 8);

  const Tensor& f32 = file.at("f32");
  CHECK(f32.dtype() == kFloat32);
  CHECK(f32.shape() == Shape{2, 3});
  CHECK(f32.to_vector<float>() == std::vector<float>{-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f});

  const Tensor& f64 = file.at("f64");
  CHECK(f64.dtype() == kFloat64);
  CHECK(f64.to_vector<double>() == std::vector<double>{0.0, 0.25, 0.5, 0.75});

  const Tensor& i64 = file.at("i64");
  CHECK(i64.dtype() == kInt64);
  CHECK(i64.to_vector<int64_t>() == std::vector<int64_t>{-3, 0, int64_t{1} << 40});

  const Tensor& u8 = file.at("u8");
  CHECK(u8.dtype() == kUInt8);
  CHECK(u8.shape() == Shape{3, 1, 2});
  CHECK(u8.to_vector<uint8_t>() == std::vector<uint8_t>{250, 251, 252, 253, 254, 255});

  // Half types have no CPU kernels; compare their bits (1.5, -2, 65504 and 1, -0.5).
  const Tensor& f16 = file.at("f16");
  CHECK(f16.dtype() == kFloat16);
  const uint16_t f16_bits[3] = {0x3E00, 0xC000, 0x7BFF};
  CHECK(bytes_of(f16) == std::string(reinterpret_cast<const char*>(f16_bits), 6));
  const Tensor& bf16 = file.at("bf16");
  CHECK(bf16.dtype() == kBFloat16);
  const uint16_t bf16_bits[2] = {0x3F80, 0xBF00};
  CHECK(bytes_of(bf16) == std::string(reinterpret_cast<const char*>(bf16_bits), 4));

  const Tensor& scalar = file.at("scalar");
  CHECK(scalar.dim() == 0);
  CHECK(scalar.item<double>() == 3.25);

  const Tensor& empty_t = file.at("empty");
  CHECK(empty_t.shape() == Shape{0, 3});
  CHECK(empty_t.numel() == 0);
}
