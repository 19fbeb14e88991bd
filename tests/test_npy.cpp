// .npy reading and writing: round trips for every dtype, NumPy-written
// fixtures (tests/goldens/npy, from scripts/check_npy.py), and every class of
// malformed file refused with the file name and the exact byte offset.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "minidl/data/npy.h"
#include "tests/npy_pattern.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace minidl;
using data::NpyArray;
using data::NpyDType;
using testing::kAllNpyDTypes;
using testing::npy_pattern;

namespace {

const fs::path kFixtures = fs::path(MINIDL_GOLDENS_DIR) / "npy";

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE_MESSAGE(in.is_open(), "missing fixture ", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void check_same(const NpyArray& got, const NpyArray& want) {
  CHECK(got.dtype == want.dtype);
  CHECK(got.shape == want.shape);
  CHECK(got.data == want.data);
}

// A version 1.0 file with the given header text (padded as np.save does) and data bytes.
std::string npy_file(const std::string& dict, const std::string& data = "", int major = 1) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  for (size_t i = 0; i < prefix - 8; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xFF));
  return out + header + data;
}

const std::string kDict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
const std::string kData(24, '\0');  // 2 * 3 float32

// parse_npy must refuse `bytes` with a message naming the file and `offset`.
void check_refused(const std::string& bytes, size_t offset, const std::string& what) {
  CAPTURE(what);
  CHECK_THROWS_CONTAINS(data::parse_npy(bytes.data(), bytes.size(), "dir/bad.npy"),
                        "parse_npy: dir/bad.npy: at byte " + std::to_string(offset) + ": ");
  CHECK_THROWS_CONTAINS(data::parse_npy(bytes.data(), bytes.size(), "dir/bad.npy"), what);
}

size_t at(const std::string& dict, const std::string& token) { return 10 + dict.find(token); }

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("minidl_test_npy_" + std::to_string(getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("npy: every dtype round-trips through format_npy/parse_npy and save_npy/load_npy") {
  TempDir tmp;
  for (NpyDType dt : kAllNpyDTypes) {
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 3, 4}, {}, {7}, {0, 3}, {1, 1, 5, 1}}) {
      CAPTURE(data::npy_descr(dt));
      CAPTURE(shape.size());
      const NpyArray a = npy_pattern(dt, shape);
      const std::string bytes = data::format_npy(a);
      CHECK(bytes.size() % 64 == a.data.size() % 64);  // the data starts 64-byte aligned
      check_same(data::parse_npy(bytes.data(), bytes.size(), "mem"), a);
      const std::string path = (tmp.path / "a.npy").string();
      data::save_npy(path, a);
      check_same(data::load_npy(path), a);
    }
  }
  // Only the final file is left: the temporary was renamed into place.
  CHECK(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator()) == 1);
}

TEST_CASE("npy: tensors round-trip; other layouts are written in C order") {
  TempDir tmp;
  const std::string path = (tmp.path / "t.npy").string();
  for (DType dt : {kFloat32, kFloat64, kInt64, kUInt8}) {
    const Tensor t = arange(24, TensorOptions(kFloat64)).reshape({2, 3, 4}).to(dt);
    data::save_npy(path, t);
    const Tensor back = data::npy_to_tensor(data::load_npy(path));
    CHECK(back.dtype() == dt);
    CHECK(back.shape() == t.shape());
    CHECK(testing::max_abs_diff(back, t) == 0.0);
  }
  const Tensor x = arange(6, TensorOptions(kFloat32)).reshape({2, 3});
  data::save_npy(path, x.t());  // a transposed view: saved as the (3, 2) array it shows
  const NpyArray a = data::load_npy(path);
  CHECK(a.shape == std::vector<int64_t>{3, 2});
  CHECK(data::npy_to_tensor(a).to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_CONTAINS(data::save_npy(path, x.to(kFloat16)), "expected a float32, float64, int64 or uint8 tensor");
}

TEST_CASE("npy: bool, uint16 and int32 become uint8 and int64 tensors") {
  const Tensor b = data::npy_to_tensor(npy_pattern(NpyDType::Bool, {5}));
  CHECK(b.dtype() == kUInt8);
  CHECK(b.to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 0, 1, 0});
  const Tensor u = data::npy_to_tensor(npy_pattern(NpyDType::UInt16, {25}));
  CHECK(u.dtype() == kInt64);
  CHECK(u.to_vector<int64_t>()[24] == (24 * 2731) % 65536);
  CHECK(u.to_vector<int64_t>()[12] == 32772);  // above int16's range: not read as signed
  const Tensor i = data::npy_to_tensor(npy_pattern(NpyDType::Int32, {3}));
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{-1000000, -899997, -799994});
}

TEST_CASE("npy: files written by NumPy load, and np.save's bytes equal ours") {
  for (NpyDType dt : kAllNpyDTypes) {
    const std::string stem = testing::npy_dtype_file_stem(dt);
    CAPTURE(stem);
    const NpyArray want = npy_pattern(dt, {2, 3, 4});
    check_same(data::load_npy((kFixtures / (stem + ".npy")).string()), want);
    CHECK(read_bytes(kFixtures / (stem + ".npy")) == data::format_npy(want));
  }
  check_same(data::load_npy((kFixtures / "scalar_f8.npy").string()), npy_pattern(NpyDType::Float64, {}));
  check_same(data::load_npy((kFixtures / "vector_i8.npy").string()), npy_pattern(NpyDType::Int64, {7}));
  check_same(data::load_npy((kFixtures / "empty_u1.npy").string()), npy_pattern(NpyDType::UInt8, {0, 3}));
  // Format versions 2.0 and 3.0 (4-byte header length).
  check_same(data::load_npy((kFixtures / "v2_f4.npy").string()), npy_pattern(NpyDType::Float32, {3, 5}));
  check_same(data::load_npy((kFixtures / "v3_f4.npy").string()), npy_pattern(NpyDType::Float32, {3, 5}));
}

TEST_CASE("npy: NumPy files minidl cannot read are refused with the file and byte offset") {
  auto refused = [](const std::string& name, size_t offset, const std::string& what) {
    const std::string path = (kFixtures / name).string();
    CAPTURE(name);
    CHECK_THROWS_CONTAINS(data::load_npy(path), path + ": at byte " + std::to_string(offset) + ": " + what);
  };
  refused("refuse_big_endian_f4.npy", 20, "big-endian data ('>f4') is not supported");
  refused("refuse_fortran_f4.npy", 44, "fortran_order True (column-major) arrays are not supported");
  refused("refuse_int8.npy", 20, "unsupported dtype '|i1'");
  refused("refuse_float16.npy", 20, "unsupported dtype '<f2'");
  refused("refuse_structured.npy", 20, "structured dtypes are not supported");
}

TEST_CASE("npy: every malformed-header class is refused with the file name and byte offset") {
  const std::string good = npy_file(kDict, kData);
  REQUIRE_NOTHROW(data::parse_npy(good.data(), good.size(), "ok.npy"));

  // Magic, version, truncation of the fixed part.
  std::string bad = good;
  bad[1] = 'X';
  check_refused(bad, 0, "not a .npy file: expected the magic string \\x93NUMPY, got \"\\x93XUMPY\"");
  check_refused("PK\x03\x04zip", 0, "not a .npy file");
  check_refused("", 0, "(the file is shorter)");
  check_refused(good.substr(0, 7), 7, "truncated file: it ends inside the version bytes");
  bad = good;
  bad[6] = 4;
  check_refused(bad, 6, "unsupported .npy format version 4.0 (supported: 1.0, 2.0, 3.0)");
  bad = good;
  bad[7] = 1;
  check_refused(bad, 6, "unsupported .npy format version 1.1");
  check_refused(good.substr(0, 9), 9, "truncated file: it ends inside the 2-byte header length at byte 8");
  check_refused(good.substr(0, 40), 40, "truncated file: the header length at byte 8 says 118 bytes from byte 10");

  // Data size against the shape.
  // (kDict pads to a 128-byte header, as np.save would.)
  check_refused(npy_file(kDict, kData.substr(0, 23)), 151,
                "truncated file: the shape (2, 3) of '<f4' needs 24 data bytes from byte 128, but the file ends at "
                "byte 151 (23 data bytes)");
  check_refused(npy_file(kDict, kData + "xyz"), 152,
                "shape/size mismatch: the shape (2, 3) of '<f4' needs 24 data bytes from byte 128, but the file has "
                "27 (3 extra bytes at the end)");

  // The dict's values.
  std::string d = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }";
  check_refused(npy_file(d, kData), at(d, "True"), "fortran_order True (column-major) arrays are not supported");
  d = "{'descr': '>f8', 'fortran_order': False, 'shape': (2, 3), }";
  check_refused(npy_file(d, kData), at(d, "'>f8'"), "big-endian data ('>f8') is not supported");
  d = "{'descr': '<c16', 'fortran_order': False, 'shape': (2, 3), }";
  check_refused(npy_file(d, kData), at(d, "'<c16'"), "unsupported dtype '<c16' (supported: '|b1', '|u1', '<u2'");
  d = "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }";
  check_refused(npy_file(d, kData), at(d, "[("), "structured dtypes are not supported");
  d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }";
  check_refused(npy_file(d, kData), at(d, "-3"), "expected a non-negative integer dimension, got '-'");
  d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }";
  check_refused(npy_file(d, kData), at(d, "3)"), "expected ',' or ')' in the shape tuple, got '3'");
  d = "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }";
  check_refused(npy_file(d, kData), at(d, "9999"), "dimension too large");
  d = "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
  check_refused(npy_file(d, kData), 10, "the shape (4294967296, 4294967296) is too large");
  // Found by fuzz_npy: no element (a 0 dimension), but the running product
  // passes 2^63 before the 0; numel() overflowed.
  d = "{'descr': '|b1', 'fortran_order': False, 'shape': (3037000500, 3037000500, 0), }";
  check_refused(npy_file(d), 10, "the shape (3037000500, 3037000500, 0) is too large (its size overflows int64)");
  d = "{'descr': '<f4', 'fortran_order': maybe, 'shape': (2, 3), }";
  check_refused(npy_file(d, kData), at(d, "maybe"), "expected True or False, got 'm'");

  // The dict's structure.
  d = "{'descr': '<f4', 'shape': (2, 3), }";
  check_refused(npy_file(d, kData), at(d, "}"), "the header has no 'fortran_order' key");
  d = "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  check_refused(npy_file(d, kData), at(d, "'descr': '<f4', 'fortran"), "the key 'descr' appears twice");
  d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}";
  check_refused(npy_file(d, kData), at(d, "'extra'"), "unexpected key 'extra' in the header");
  d = "['descr', '<f4']";
  check_refused(npy_file(d, kData), 10, "expected the header to start with '{', got '['");
  d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } junk";
  check_refused(npy_file(d, kData), at(d, "junk"), "unexpected 'j' after the header dict");
  d = "{'descr': '<f4', 'fortran_order': False 'shape': (2, 3)}";
  check_refused(npy_file(d, kData), at(d, "'shape'"), "expected ',' or '}' in the header dict, got '''");
  d = "{'descr: '<f4'}";
  check_refused(npy_file(d, kData), at(d, "<"), "expected ':' after the key 'descr: '");
  check_refused(npy_file("{'descr", kData), 11, "unterminated string in the header");
}

TEST_CASE("npy: accepted header variants (key order, quotes, 2.0 length, Python 2 longs, '<u1')") {
  const NpyArray want = npy_pattern(NpyDType::Float32, {2, 3});
  const std::string data(want.data.begin(), want.data.end());
  for (const std::string& d : {
           std::string("{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}"),
           std::string("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2L, 3L)}"),
           std::string("{ 'descr' : '<f4' ,'fortran_order':False,'shape':( 2 , 3 , ) , }"),
       }) {
    CAPTURE(d);
    const std::string bytes = npy_file(d, data);
    check_same(data::parse_npy(bytes.data(), bytes.size(), "x.npy"), want);
    const std::string v2 = npy_file(d, data, 2);
    check_same(data::parse_npy(v2.data(), v2.size(), "x.npy"), want);
  }
  const std::string u1 = npy_file("{'descr': '<u1', 'fortran_order': False, 'shape': (2,), }", "\x05\x07");
  CHECK(data::parse_npy(u1.data(), u1.size(), "u1.npy").dtype == NpyDType::UInt8);
}

TEST_CASE("npy: load_npy and save_npy name the path when the file system refuses") {
  TempDir tmp;
  const std::string missing = (tmp.path / "missing.npy").string();
  CHECK_THROWS_CONTAINS(data::load_npy(missing), "load_npy: cannot open " + missing);
  CHECK_THROWS_CONTAINS(data::load_npy(tmp.path.string()), "is a directory");
  const std::string no_dir = (tmp.path / "no" / "such" / "dir.npy").string();
  CHECK_THROWS_CONTAINS(data::save_npy(no_dir, npy_pattern(NpyDType::UInt8, {2})), "save_npy: " + no_dir);
  NpyArray short_data = npy_pattern(NpyDType::Float32, {2, 2});
  short_data.data.pop_back();
  CHECK_THROWS_CONTAINS(data::format_npy(short_data), "needs 16 data bytes, got 15");
  NpyArray empty_but_huge = npy_pattern(NpyDType::Float64, {0});
  empty_but_huge.shape = {int64_t{1} << 61, 2, 0};  // no element, but 2^62 * 8 bytes on the way
  CHECK_THROWS_CONTAINS(data::format_npy(empty_but_huge), "is too large (its size overflows int64)");
}

TEST_CASE("npy: mutated and truncated files either parse or throw minidl::Error") {
  // A small deterministic fuzz of parse_npy (run under ASan by the sanitize
  // build): byte flips in the header, and every truncation.
  std::vector<std::string> seeds;
  for (NpyDType dt : kAllNpyDTypes) seeds.push_back(data::format_npy(npy_pattern(dt, {2, 3})));
  seeds.push_back(read_bytes(kFixtures / "v3_f4.npy"));
  Generator gen(7);
  int parsed = 0, refused = 0;
  auto run = [&](const std::string& bytes) {
    try {
      const NpyArray a = data::parse_npy(bytes.data(), bytes.size(), "fuzz");
      CHECK(a.data.size() == static_cast<size_t>(a.numel()) * data::npy_itemsize(a.dtype));
      ++parsed;
    } catch (const Error&) {
      ++refused;
    }
  };
  for (const std::string& s : seeds) {
    for (size_t n = 0; n < s.size(); ++n) run(s.substr(0, n));
    for (int k = 0; k < 400; ++k) {
      std::string m = s;
      const int flips = 1 + static_cast<int>(gen.randint(0, 3));
      for (int f = 0; f < flips; ++f) {
        const auto pos = static_cast<size_t>(gen.randint(0, std::min<int64_t>(static_cast<int64_t>(m.size()), 80)));
        m[pos] = static_cast<char>(gen.randint(0, 256));
      }
      run(m);
    }
  }
  CHECK(refused > 0);
  CHECK(parsed > 0);  // flips in the padding or the data still parse
}
