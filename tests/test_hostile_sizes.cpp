// Sizes whose element or byte count does not fit int64, and negative sizes:
// every path that creates a tensor (factories, views, a safetensors file)
// refuses them with minidl::Error in PyTorch's words. Before, the wrapped
// count gave an "empty" tensor that indexing could read past.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>

#include "minidl/core/safetensors.h"
#include "tests/test_util.h"

using namespace minidl;
namespace fs = std::filesystem;

namespace {

constexpr int64_t k2to62 = int64_t{1} << 62;
constexpr int64_t k2to40 = int64_t{1} << 40;

}  // namespace

TEST_CASE("numel_of and checked_numel refuse overflow and negative sizes") {
  CHECK(numel_of({3, 4}) == 12);
  CHECK(numel_of({}) == 1);
  CHECK(numel_of({k2to62, 0}) == 0);
  CHECK(checked_numel({k2to62, 1}) == k2to62);
  CHECK(!checked_numel({k2to62, 4}).has_value());
  CHECK(!checked_numel({k2to40, k2to40, 0}).has_value());  // the running product, as PyTorch counts
  CHECK(!checked_numel({2, -1}).has_value());
  CHECK(!checked_nbytes({k2to62}, 4).has_value());  // 2^64 bytes
  CHECK(checked_nbytes({k2to62}, 1) == k2to62);
  CHECK_THROWS_CONTAINS(numel_of({k2to62, 4}), "numel: integer multiplication overflow for sizes [4611686018427387904, 4]");
  CHECK_THROWS_CONTAINS(numel_of({2, -3}), "numel: negative dimension -3 in sizes [2, -3]");
}

TEST_CASE("factories refuse a size whose storage size overflows") {
  const std::string overflow = "Storage size calculation overflowed with sizes=[4611686018427387904, 4]";
  CHECK_THROWS_CONTAINS(empty({k2to62, 4}), "empty: " + overflow);
  CHECK_THROWS_CONTAINS(zeros({k2to62, 4}), overflow);
  CHECK_THROWS_CONTAINS(ones({k2to62, 4}), overflow);
  CHECK_THROWS_CONTAINS(full({k2to62, 4}, 2.0), "full: " + overflow);
  CHECK_THROWS_CONTAINS(rand({k2to62, 4}), "rand: " + overflow);
  CHECK_THROWS_CONTAINS(randn({k2to62, 4}), "randn: " + overflow);
  CHECK_THROWS_CONTAINS(randint(0, 5, {k2to62, 4}), "randint: " + overflow);
  CHECK_THROWS_CONTAINS(empty({k2to40, k2to40, 0}),
                        "Storage size calculation overflowed with sizes=[1099511627776, 1099511627776, 0]");
  // The element count fits int64, the bytes (x 4 for float32) do not: PyTorch refuses it too.
  CHECK_THROWS_CONTAINS(empty({int64_t{1} << 61}), "Storage size calculation overflowed with sizes=[2305843009213693952]");
  CHECK_THROWS_CONTAINS(randperm(k2to62), "randperm: Storage size calculation overflowed");
  CHECK_THROWS_CONTAINS(from_buffer(nullptr, {k2to62, 4}, kFloat32), overflow);
  CHECK_THROWS_CONTAINS(tensor(std::vector<float>{1, 2}, {k2to62, 4}), "numel: integer multiplication overflow");
#if !defined(__SANITIZE_ADDRESS__)  // ASan aborts on a request this large instead of returning null
  // A huge but representable size is an allocation failure, still minidl::Error (not std::bad_alloc).
  CHECK_THROWS_CONTAINS(randperm(int64_t{1} << 58), "out of memory");
  CHECK_THROWS_CONTAINS(empty({int64_t{1} << 60}, TensorOptions(kUInt8)), "out of memory");
#endif
}

TEST_CASE("factories refuse negative sizes in PyTorch's words") {
  CHECK_THROWS_CONTAINS(empty({-1, 2}), "Trying to create tensor with negative dimension -1: [-1, 2]");
  CHECK_THROWS_CONTAINS(zeros({2, -5}), "Trying to create tensor with negative dimension -5: [2, -5]");
  CHECK_THROWS_CONTAINS(randperm(-1), "Trying to create tensor with negative dimension -1: [-1]");
  CHECK_THROWS_CONTAINS(tensor(std::vector<float>{1, 2, 3}, {-1, -3}), "negative dimension");
}

TEST_CASE("arange refuses counts beyond int64 and non-finite bounds") {
  CHECK_THROWS_CONTAINS(arange(0.0, 1e30, 1.0), "arange: invalid size, possible overflow?");
  CHECK_THROWS_CONTAINS(arange(0.0, std::numeric_limits<double>::quiet_NaN(), 1.0), "arange: unsupported range: 0 -> nan");
  CHECK_THROWS_CONTAINS(arange(0.0, std::numeric_limits<double>::infinity(), 1.0), "arange: unsupported range: 0 -> inf");
  CHECK(arange(0.0, 5.0, 1.0).numel() == 5);
}

TEST_CASE("views refuse shapes whose element count overflows or is negative") {
  Tensor empty0 = zeros({0});
  CHECK_THROWS_CONTAINS(empty0.view({k2to62, 4, 0}), "numel: integer multiplication overflow");
  CHECK_THROWS_CONTAINS(empty0.reshape({k2to62, 4}), "numel: integer multiplication overflow");
  CHECK_THROWS_CONTAINS(empty0.reshape({-1, k2to62, 4}), "numel: integer multiplication overflow");
  CHECK_THROWS_CONTAINS(empty0.reshape({-1, 0}),
                        "cannot reshape tensor of 0 elements into shape [-1, 0] because the unspecified "
                        "dimension size -1 can be any value and is ambiguous");
  CHECK_THROWS_CONTAINS(ones({1}).view({-2}), "invalid shape dimension -2 at index 0 of shape [-2]");
  CHECK_THROWS_CONTAINS(ones({2}).reshape({-2, -1}), "invalid shape dimension -2 at index 0 of shape [-2, -1]");

  Tensor one = ones({1});
  CHECK_THROWS_CONTAINS(one.expand({k2to62, 4}), "numel: integer multiplication overflow");
  CHECK_THROWS_CONTAINS(one.expand({int64_t{1} << 32, int64_t{1} << 32}), "numel: integer multiplication overflow");
  // Before: have == 1 accepted any want, so expand(-2) made a view of size -2.
  CHECK_THROWS_CONTAINS(one.expand({-2}), "expand: the expanded size of the tensor (-2) must be non-negative");
  CHECK_THROWS_CONTAINS(one.expand({2, -2}), "expand: the expanded size of the tensor (-2) must be non-negative");
  // What still works: -1 keeps a size, a large expand that fits is a stride-0 view.
  CHECK(ones({3, 1}).expand({-1, 4}).shape() == Shape{3, 4});
  Tensor big = one.expand({int64_t{1} << 31, int64_t{1} << 31});
  CHECK(big.numel() == int64_t{1} << 62);
  CHECK(big.stride(0) == 0);
  CHECK_THROWS_CONTAINS(make_view(one, {k2to62, 4}, {0, 0}, 0), "numel: integer multiplication overflow");
}

TEST_CASE("a safetensors file with an overflowing shape is refused, naming the file") {
  const fs::path path = fs::temp_directory_path() / ("minidl_hostile_sizes_" + std::to_string(::getpid()) + ".safetensors");
  // U8 [2^62, 2, 0]: 0 data bytes, but the running element count passes 2^63.
  const std::string header = R"({"x":{"dtype":"U8","shape":[4611686018427387904,2,0],"data_offsets":[0,0]}})";
  {
    std::ofstream f(path, std::ios::binary);
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header;
  }
  CHECK_THROWS_CONTAINS(load_safetensors(path.string()),
                        path.string() + ": tensor 'x' at byte offset 9: shape [4611686018427387904,2,0] is too large");
  fs::remove(path);
}
