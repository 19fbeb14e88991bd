// Tensor methods, integer arithmetic, factories, .npy arrays and the example
// writers given what a PyTorch user could give them by mistake, each once
// undefined behaviour, a crash, a hang or a silently wrong value (found by an
// ASan/UBSan probe against PyTorch 2.15).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "examples/common/svg_plot.h"
#include "examples/common/tensorboard.h"
#include "minidl/data/npy.h"
#include "minidl/minidl.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("minidl_bad_tensor_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("narrow: a huge length is refused without overflow; a negative one in PyTorch's words") {
  const Tensor a = arange(6.0).reshape({2, 3});
  // start + length overflowed int64 (UBSan: signed integer overflow).
  CHECK_THROWS_CONTAINS(a.narrow(1, 1, kMax), "start (1) + length (9223372036854775807) exceeds dimension size (3).");
  CHECK_THROWS_CONTAINS(a.narrow(1, 0, -1), "narrow(): length must be non-negative.");
  CHECK(a.narrow(1, -2, 2).to_vector<double>() == std::vector<double>{1, 2, 4, 5});
}

TEST_CASE("0-d tensors: flatten, transpose and squeeze check their dims as PyTorch") {
  const Tensor s = scalar_tensor(1.0);
  // Any dim was accepted silently.
  CHECK_THROWS_CONTAINS(s.flatten(1, 0), "Dimension out of range (expected to be in range of [-1, 0], but got 1)");
  CHECK_THROWS_CONTAINS(s.transpose(0, 1), "Dimension out of range (expected to be in range of [-1, 0], but got 1)");
  CHECK_THROWS_CONTAINS(s.squeeze(5), "Dimension out of range (expected to be in range of [-1, 0], but got 5)");
  CHECK(s.flatten(0, -1).shape() == Shape{1});
  CHECK(s.transpose(-1, 0).dim() == 0);
  CHECK(s.squeeze(-1).dim() == 0);
}

TEST_CASE("int64 add, sub, mul, neg and abs wrap around as PyTorch's") {
  // Each was signed overflow (undefined behaviour; UBSan aborted).
  const Tensor big = full({1}, 9e18, kInt64), lowest = tensor(std::vector<int64_t>{kMin});
  CHECK(mul(big, big).item<int64_t>() == -4977229585478320128LL);  // PyTorch's value
  CHECK(add(big, big).item<int64_t>() == -446744073709551616LL);  // 1.8e19 - 2^64
  CHECK(sub(lowest, full({1}, 1, kInt64)).item<int64_t>() == kMax);
  CHECK(add(big, int64_t{9000000000000000000}).item<int64_t>() == -446744073709551616LL);
  CHECK(add(big, big, 2.0).item<int64_t>() == 8553255926290448384LL);  // 2.7e19 - 2^64
  CHECK(neg(lowest).item<int64_t>() == kMin);
  CHECK(abs(lowest).item<int64_t>() == kMin);
  CHECK(neg(full({1}, 3, kInt64)).item<int64_t>() == -3);
}

TEST_CASE("item and to_vector refuse a value the requested integer type cannot hold") {
  // NaN or 1e30 into int64 was an undefined conversion; 2^40 into int gave 0.
  CHECK_THROWS_CONTAINS(scalar_tensor(kNaN).item<int64_t>(), "value cannot be converted to type int64_t without overflow");
  CHECK_THROWS_CONTAINS(scalar_tensor(1e30).item<int64_t>(), "value cannot be converted to type int64_t without overflow");
  CHECK_THROWS_CONTAINS(scalar_tensor(300.0).item<uint8_t>(), "value cannot be converted to type uint8_t without overflow");
  CHECK_THROWS_CONTAINS(scalar_tensor(-1.0).item<uint8_t>(), "value cannot be converted to type uint8_t without overflow");
  CHECK_THROWS_CONTAINS(tensor(std::vector<int64_t>{int64_t{1} << 40}).item<int>(),
                        "value cannot be converted to type int without overflow");
  CHECK_THROWS_CONTAINS(tensor({1.0, kNaN}).to_vector<int64_t>(), "(element 1) cannot be converted to type int64_t");
  CHECK_THROWS_CONTAINS(scalar_tensor(-0.5).item<uint8_t>(), "value cannot be converted to type uint8_t");
  CHECK(scalar_tensor(-0.5).item<int64_t>() == 0);  // truncated, as PyTorch's
  CHECK(scalar_tensor(255.9).item<uint8_t>() == 255);
  CHECK(tensor(std::vector<int64_t>{kMin}).item<int64_t>() == kMin);
  CHECK(tensor({2.5, -3.5}).to_vector<int64_t>() == std::vector<int64_t>{2, -3});
  CHECK(std::isnan(scalar_tensor(kNaN).item<double>()));
}

TEST_CASE("scalar_tensor and tensor refuse values an integer dtype cannot hold, as PyTorch's") {
  // 1e30 became int64's lowest value, NaN a uint8 0, 300 a uint8 44.
  CHECK_THROWS_CONTAINS(scalar_tensor(1e30, kInt64), "scalar_tensor: value cannot be converted to type int64_t without overflow");
  CHECK_THROWS_CONTAINS(scalar_tensor(kNaN, kUInt8), "scalar_tensor: value cannot be converted to type uint8_t without overflow");
  CHECK_THROWS_CONTAINS(tensor(std::vector<double>{1.0, 300.0}, {2}, kUInt8),
                        "tensor: value cannot be converted to type uint8_t without overflow");
  CHECK_THROWS_CONTAINS(tensor(std::vector<int64_t>{-1}, {1}, kUInt8), "tensor: value cannot be converted to type uint8_t");
  CHECK(scalar_tensor(2.7, kInt64).item<int64_t>() == 2);
  CHECK_THROWS_CONTAINS(tensor(std::vector<double>{-0.5}, {1}, kUInt8), "tensor: value cannot be converted to type uint8_t");
  CHECK(tensor(std::vector<double>{255.0, 0.5}, {2}, kUInt8).to_vector<int64_t>() == std::vector<int64_t>{255, 0});
  CHECK(tensor(std::vector<int64_t>{kMax}).item<int64_t>() == kMax);
}

TEST_CASE("npy_to_tensor refuses an NpyArray whose data does not hold its shape") {
  data::NpyArray a;
  a.shape = {3};
  a.data.resize(2);  // from_buffer read 12 bytes from a 2-byte vector (heap-buffer-overflow)
  CHECK_THROWS_CONTAINS(data::npy_to_tensor(a), "npy_to_tensor: the (3,) '<f4' array needs 12 data bytes, got 2");
  a.data.resize(12);
  CHECK(data::npy_to_tensor(a).shape() == Shape{3});
}

TEST_CASE("write_svg_plot ends on huge and subnormal ranges") {
  const std::string dir = temp_dir("svg");
  using examples::Panel;
  using examples::Series;
  // Both looped without end (NaN ticks: the span overflowed to inf, or a
  // subnormal's 10% padding was 0 and the tick step 0).
  examples::write_svg_plot(dir + "/huge.svg", {Panel{"t", "x", "y", {Series{"s", {-1.7e308, 0, 1.7e308}, {-1.7e308, 1, 1.7e308}}}}});
  examples::write_svg_plot(dir + "/tiny.svg", {Panel{"t", "x", "y", {Series{"s", {1, 2}, {5e-324, 5e-324}}}}});
  Panel log{"t", "x", "y", {Series{"s", {1e-300, 1, 1e300}, {4.9e-324, 1, 1.7e308}}}};
  log.log_x = log.log_y = true;
  examples::write_svg_plot(dir + "/log.svg", {log});
  CHECK(std::filesystem::file_size(dir + "/huge.svg") > 0);
  CHECK(std::filesystem::file_size(dir + "/tiny.svg") > 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("TensorBoardWriter::add_image from raw pixels refuses a null pointer and a huge size") {
  const std::string dir = temp_dir("tb");
  {
    examples::TensorBoardWriter w(dir);
    // A null pointer was read by the PNG encoder (SEGV); width * channels overflowed int.
    CHECK_THROWS_CONTAINS(w.add_image("img", nullptr, 2, 2, 3, 0), "add_image: expected pixels for the 2x2 image 'img'");
    uint8_t px[12] = {};
    CHECK_THROWS_CONTAINS(w.add_image("img", px, 1 << 30, 1 << 30, 3, 0), "add_image: unsupported image size");
    w.add_image("img", px, 2, 2, 3, 0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("randint and randperm refuse values their dtype cannot hold, as PyTorch") {
  // uint8 wrapped (randint(0, 1000) gave values mod 256), float16 rounded indices into duplicates.
  CHECK_THROWS_CONTAINS(randint(0, 1000, {3}, TensorOptions(kUInt8)), "randint: to - 1 is out of bounds for unsigned char");
  CHECK_THROWS_CONTAINS(randint(-5, 5, {3}, TensorOptions(kUInt8)), "randint: from is out of bounds for unsigned char");
  CHECK(randint(0, 256, {64}, TensorOptions(kUInt8)).to_vector<int64_t>().size() == 64);
  CHECK_THROWS_CONTAINS(randperm(300, TensorOptions(kUInt8)), "randperm: value cannot be converted to type uint8_t");
  CHECK_THROWS_CONTAINS(randperm(5000, TensorOptions(kFloat16)), "n cannot be greater than 2049 for Half type.");
  CHECK_THROWS_CONTAINS(randperm(300, TensorOptions(kBFloat16)), "n cannot be greater than 257 for BFloat16 type.");
  std::vector<int64_t> perm = randperm(256, TensorOptions(kUInt8)).to_vector<int64_t>();
  std::sort(perm.begin(), perm.end());
  for (int64_t i = 0; i < 256; ++i) CHECK(perm[static_cast<size_t>(i)] == i);
  // int64 values past 2^53 keep their low bits (they went through a double).
  const int64_t base = (int64_t{1} << 60) + 1;
  for (int64_t v : randint(base, base + 2, {32}, TensorOptions(kInt64)).to_vector<int64_t>())
    CHECK((v == base || v == base + 1));
}
