// The float32 sum kernel (ops/cpu/sum_float.h: groups of 256 values added
// pairwise in float32, then double lanes), through sum, mean and global
// average pooling: every element counted exactly once at every length and
// position (a dropped or repeated tail value, vector or group fails), the
// AVX-512/AVX2 version bit for bit equal to the portable definition (and the
// library's sums equal to it), the error bound 4 u sum|x| + final rounding
// against long double on data with cancellation, strided views, 1 vs 2
// threads, and accuracy at least PyTorch's on a fixture of PyTorch's float32
// sums (tests/goldens/float32_sums.json, scripts/make_sum_goldens.py).
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <vector>

#include "minidl/core/parallel.h"
#include "minidl/ops/cpu/sum_float.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

using LD = long double;

// Lengths around the group (256), the vector (16) and the chunk (16384) sizes.
std::vector<int64_t> lengths() {
  std::vector<int64_t> n;
  for (int64_t i = 0; i <= 40; ++i) n.push_back(i);
  for (int64_t g : {256, 512, 768, 1024, 4096, 16384, 32768})
    for (int64_t d : {-17, -16, -15, -1, 0, 1, 15, 16, 17}) n.push_back(g + d);
  for (int64_t i : {784, 1000, 4099, 65537}) n.push_back(i);
  return n;
}

// 4 u sum|x| + (n / 256 + 32) 2^-53 sum|x| (see tests/test_reduce_fast_paths.cpp's check_close).
LD kernel_bound(LD sum_abs, int64_t n) {
  return 4 * std::ldexp(1.0L, -24) * sum_abs + (static_cast<LD>(n) / 256 + 32) * std::ldexp(1.0L, -53) * sum_abs;
}

Tensor eye(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i * n + i)] = 1.0f;
  return tensor(v, {n, n});
}

LD ulp_of(LD v) {
  const float f = std::abs(static_cast<float>(v));
  return static_cast<LD>(std::nextafter(f, INFINITY)) - f;
}

// The fixture's values (scripts/make_sum_goldens.py's values()).
std::vector<float> hashed_values(int64_t rows, int64_t n, double offset) {
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (size_t g = 0; g < x.size(); ++g) {
    uint32_t h = static_cast<uint32_t>(g) * 2654435761u + 12345u;
    for (int k = 0; k < 2; ++k) {
      h ^= h >> 16;
      h *= 0x45D9F3Bu;
    }
    h ^= h >> 16;
    const double m = static_cast<double>(h & 0xFFFFFFu);
    const int e = static_cast<int>((h >> 24) % 16) - 8;
    x[g] = static_cast<float>(std::ldexp((m - 0x1p23) / 0x1p24, e) + offset);
  }
  return x;
}

}  // namespace

TEST_CASE("float32 sums count every element once: identity rows and single ones at every position") {
  for (int64_t n : lengths()) {
    if (n == 0 || n > 1100) continue;
    CAPTURE(n);
    // Row r has its one at position r: every position of every length.
    const std::vector<float> s = eye(n).sum({1}).to_vector<float>();
    for (int64_t r = 0; r < n; ++r) CHECK(s[r] == 1.0f);
    // The same through global average pooling (planes of n values).
    const std::vector<float> m = adaptive_avg_pool2d(eye(n).reshape({1, n, 1, n}), {1, 1}).to_vector<float>();
    for (int64_t r = 0; r < n; ++r) CHECK(m[r] == static_cast<float>(1.0 / static_cast<double>(n)));
  }
  // Whole-tensor sums over several chunks: a single 1 (and 2^-20, below the
  // float32 ulp of the other values' sum, so it must reach the double lanes
  // on its own) at group, vector and chunk boundaries.
  const int64_t n = 3 * 16384 + 777;
  for (int64_t at : {int64_t{0}, int64_t{255}, int64_t{256}, int64_t{16383}, int64_t{16384}, n - 777, n - 10, n - 1}) {
    CAPTURE(at);
    Tensor x = zeros({n});
    x.narrow(0, at, 1).fill_(1.0);
    CHECK(x.sum().item<float>() == 1.0f);
    x.fill_(0.5);
    x.narrow(0, at, 1).fill_(0.5 + 0x1p-20);
    CHECK(static_cast<double>(x.sum().item<float>()) == static_cast<double>(static_cast<float>(0.5 * n + 0x1p-20)));
  }
}

TEST_CASE("the vector float32 kernel gives the portable definition's bits, and so does sum") {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  for (int64_t n : lengths()) {
    CAPTURE(n);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(gen) * 100 + 1;
    const double portable = cpu::sum_floats_portable(x.data(), n);
    CHECK(cpu::sum_floats(x.data(), n) == portable);
    if (n > 0 && n <= 16384)  // one chunk: the library's sum is the kernel's, rounded once
      CHECK(tensor(x).sum().item<float>() == static_cast<float>(portable));
  }
}

TEST_CASE("float32 sums within 4 u sum|x| of long double: cancellation, magnitudes, strided rows, 1 vs 2 threads") {
  manual_seed(11);
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{784}, int64_t{4096}, int64_t{4111},
                    int64_t{65537}}) {
    CAPTURE(n);
    // Zero mean over 10 binary orders of magnitude; exact cancellation: v then -v.
    const Tensor mag = exp(randint(-5, 5, {4, n}).to(kFloat32) * 0.7);
    const Tensor a = randn({4, n}) * mag;
    const Tensor both = cat({a, -a}, 1).index_select(1, randperm(2 * n));  // exact sum 0
    const Tensor strided = (randn({2 * n, 3}) + 0.01).t();                    // rows of stride 3
    for (const Tensor& x : {a, both, strided}) {
      const std::vector<float> v = x.contiguous().to_vector<float>();
      const int64_t R = x.shape()[0], C = x.shape()[1];
      const std::vector<float> got = x.sum({1}).to_vector<float>(), mean = x.mean({1}).to_vector<float>();
      for (int64_t r = 0; r < R; ++r) {
        LD s = 0, sa = 0;
        for (int64_t c = 0; c < C; ++c) s += v[r * C + c], sa += std::abs(static_cast<LD>(v[r * C + c]));
        CHECK(std::abs(got[r] - s) <= kernel_bound(sa, C) + ulp_of(s));
        CHECK(std::abs(mean[r] - s / C) <= kernel_bound(sa / C, C) + ulp_of(s / C));
      }
    }
    const int saved = get_num_threads();
    set_num_threads(1);
    const std::vector<float> one = both.sum({1}).to_vector<float>();
    set_num_threads(2);
    const std::vector<float> two = both.sum({1}).to_vector<float>();
    set_num_threads(saved);
    CHECK(one == two);
  }
  // A constant run: the groups are exact, so the sum is the correctly rounded one.
  CHECK(full({1 << 20}, 0.1f).sum().item<float>() == static_cast<float>((1 << 20) * static_cast<double>(0.1f)));
}

TEST_CASE("float32 row sums at least as accurate as PyTorch's (tests/goldens/float32_sums.json)") {
  std::ifstream in(std::string(MINIDL_GOLDENS_DIR) + "/float32_sums.json");
  REQUIRE(in.good());
  const nlohmann::json doc = nlohmann::json::parse(in);
  for (const auto& c : doc.at("cases")) {
    const int64_t rows = c.at("rows"), n = c.at("n");
    const double offset = c.at("offset");
    CAPTURE(n);
    CAPTURE(offset);
    const std::vector<float> got = tensor(hashed_values(rows, n, offset), {rows, n}).sum({1}).to_vector<float>();
    double ours = 0, theirs = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double exact = c.at("exact")[r], torch = c.at("torch")[r], sum_abs = c.at("sum_abs")[r];
      CHECK(std::abs(got[r] - exact) <= kernel_bound(sum_abs, n) + ulp_of(exact));
      ours += std::abs(got[r] - exact);
      theirs += std::abs(torch - exact);
    }
    MESSAGE("n ", n, " offset ", offset, ": total |error| minidl ", ours, ", PyTorch ", theirs);
    CHECK(ours <= theirs);
  }
}
