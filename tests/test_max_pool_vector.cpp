// The vectorized float32 max_pool2d path (stride 1 or 2, no dilation; ops/cpu/
// pooling.cpp's max_pool_plane_vec) against the general nest, which float64
// still takes: float32 values widen exactly, so values and indices must be
// identical, through ties, NaN, -inf windows, padding, ceil_mode, row widths
// around the 8-output blocks, non-contiguous input, 1 vs 2 threads, and
// float16/bfloat16 (widened rows) against float64. And
// the plain 2x2 / 2x2x2 stride-2 window path (every dtype takes it) against a
// direct window loop written here: values and indices through ties and NaN.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "minidl/core/parallel.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

struct Case {
  int64_t k, s, p;
  bool ceil;
};

// Elements that differ (two NaNs are equal here).
int64_t mismatches(const std::vector<double>& a, const std::vector<double>& b) {
  int64_t bad = a.size() == b.size() ? 0 : 1;
  for (size_t j = 0; j < std::min(a.size(), b.size()); ++j)
    bad += !(a[j] == b[j] || (std::isnan(a[j]) && std::isnan(b[j])));
  return bad;
}

// float32 (vector path) against float64 (general nest): same values and indices.
void check_case(const Tensor& x, const Case& c) {
  CAPTURE(c.k);
  CAPTURE(c.s);
  CAPTURE(c.p);
  CAPTURE(c.ceil);
  CAPTURE(x.shape()[3]);
  auto [y, i] = max_pool2d_with_indices(x, {c.k, c.k}, {c.s, c.s}, {c.p, c.p}, {1, 1}, c.ceil);
  auto [y64, i64] = max_pool2d_with_indices(x.to(kFloat64), {c.k, c.k}, {c.s, c.s}, {c.p, c.p}, {1, 1}, c.ceil);
  REQUIRE(y.shape() == y64.shape());
  const std::vector<double> a = y.to_vector<double>(), b = y64.to_vector<double>();
  CHECK(mismatches(a, b) == 0);
  CHECK(i.to_vector<int64_t>() == i64.to_vector<int64_t>());
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t k = 1; k <= 5; ++k)
    for (int64_t s : {1, 2})
      for (int64_t p = 0; p <= k / 2; ++p)
        for (bool ceil : {false, true}) out.push_back({k, s, p, ceil});
  return out;
}

}  // namespace

TEST_CASE("vector max_pool2d equals the general nest: random data, widths around the 8-output blocks") {
  manual_seed(0);
  for (int64_t w : {1, 2, 5, 8, 15, 16, 17, 28, 33}) {
    const Tensor x = randn({2, 3, 7, w});
    for (const Case& c : cases())
      if (c.k <= w + 2 * c.p && c.k <= 7 + 2 * c.p) check_case(x, c);
  }
}

TEST_CASE("vector max_pool2d: ties keep the first tap, NaN the last, -inf windows the first inside tap") {
  manual_seed(1);
  Tensor x = randint(-2, 3, {2, 2, 9, 21}).to(kFloat32);  // few distinct values: many ties
  x.select(0, 1).select(0, 0).fill_(-std::numeric_limits<double>::infinity());
  check_case(x, {3, 2, 1, false});
  check_case(x, {2, 1, 1, true});
  Tensor n = randn({1, 2, 10, 19});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t h : {0, 4, 9})
    for (int64_t w : {0, 3, 8, 9, 18}) n.select(0, 0).select(0, 1).select(0, h).narrow(0, w, 1).fill_(nan);
  for (const Case& c : cases()) check_case(n, c);
}

TEST_CASE("vector max_pool2d on non-contiguous input and at 1 vs 2 threads") {
  manual_seed(2);
  const Tensor base = randn({3, 6, 20, 40});
  const Tensor view = base.narrow(3, 5, 30).narrow(1, 1, 4).transpose(2, 3);  // (3, 4, 30, 20)
  check_case(view, {3, 2, 1, false});
  const Tensor big = randn({4, 64, 28, 28});
  const int saved = get_num_threads();
  set_num_threads(1);
  auto [y1, i1] = max_pool2d_with_indices(big, {3, 3}, {2, 2}, {1, 1});
  set_num_threads(2);
  auto [y2, i2] = max_pool2d_with_indices(big, {3, 3}, {2, 2}, {1, 1});
  set_num_threads(saved);
  CHECK(y1.to_vector<float>() == y2.to_vector<float>());
  CHECK(i1.to_vector<int64_t>() == i2.to_vector<int64_t>());
  check_case(big, {3, 2, 1, false});
  CHECK(max_pool2d(zeros({0, 3, 8, 8}), {3, 3}, {2, 2}, {1, 1}).shape() == Shape{0, 3, 4, 4});
}

TEST_CASE("vector max_pool2d on float16/bfloat16 (rows widened to float) equals the general nest") {
  manual_seed(4);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const DType dt : {kBFloat16, kFloat16}) {
    CAPTURE(dt);
    for (int64_t w : {3, 8, 17, 28}) {
      Tensor x = randn({2, 3, 9, w}).to(dt);
      x.select(0, 0).select(0, 1).select(0, 4).narrow(0, w / 2, 1).fill_(nan);
      x.select(0, 1).select(0, 2).fill_(-std::numeric_limits<double>::infinity());
      for (const Case& c : cases())
        if (c.k <= w + 2 * c.p && c.k <= 9 + 2 * c.p) check_case(x, c);
    }
    check_case(randint(-2, 3, {2, 2, 9, 21}).to(dt), {3, 2, 1, false});  // ties
  }
}

namespace {

// PyTorch's max pooling rule over a (kd, 2, 2) window of stride (kd, 2, 2),
// written out: the first tap starts, a larger value or a NaN replaces it.
void direct_plain_pool(const std::vector<double>& x, int64_t planes, int64_t D, int64_t H, int64_t W, int64_t kd,
                       std::vector<double>& y, std::vector<int64_t>& idx) {
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t od = 0; od < D / kd; ++od)
      for (int64_t oh = 0; oh < H / 2; ++oh)
        for (int64_t ow = 0; ow < W / 2; ++ow) {
          double best = 0;
          int64_t at = -1;
          for (int64_t a = 0; a < kd; ++a)
            for (int64_t b = 0; b < 2; ++b)
              for (int64_t c = 0; c < 2; ++c) {
                const int64_t i = ((od * kd + a) * H + 2 * oh + b) * W + 2 * ow + c;
                const double v = x[static_cast<size_t>(pl * D * H * W + i)];
                if (at < 0 || v > best || std::isnan(v)) {
                  best = v;
                  at = i;
                }
              }
          y.push_back(best);
          idx.push_back(at);
        }
}

}  // namespace

TEST_CASE("plain 2x2 and 2x2x2 stride-2 pools equal a direct window loop: ties, NaN, odd sizes, every dtype") {
  manual_seed(3);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Shape& shape : {Shape{2, 3, 4, 6, 10}, Shape{1, 2, 5, 7, 9}, Shape{2, 1, 2, 2, 2}}) {
    Tensor x = randint(-2, 3, shape, kFloat64);  // few distinct values: many ties, exact in 16 bits
    x.select(0, 0).select(0, 0).select(0, 1).select(0, 1).narrow(0, 0, 2).fill_(nan);
    x.select(0, 0).select(0, 0).select(0, 0).select(0, 0).narrow(0, 1, 1).fill_(nan);
    x.select(0, shape[0] - 1).select(0, 0).fill_(-std::numeric_limits<double>::infinity());
    const std::vector<double> xv = x.to_vector<double>();
    const int64_t planes = shape[0] * shape[1], D = shape[2], H = shape[3], W = shape[4];
    for (const DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      CAPTURE(dt);
      CAPTURE(shape);
      for (int64_t kd : {1, 2}) {
        CAPTURE(kd);
        std::vector<double> want;
        std::vector<int64_t> want_i;
        direct_plain_pool(xv, planes, D, H, W, kd, want, want_i);
        auto [y, i] = max_pool3d_with_indices(x.to(dt), {kd, 2, 2}, {kd, 2, 2});
        const std::vector<double> got = y.to_vector<double>();
        REQUIRE(got.size() == want.size());
        CHECK(mismatches(got, want) == 0);
        CHECK(i.to_vector<int64_t>() == want_i);
      }
      // 2-D: each depth slice a plane of its own.
      std::vector<double> want;
      std::vector<int64_t> want_i;
      direct_plain_pool(xv, planes * D, 1, H, W, 1, want, want_i);
      auto [y, i] = max_pool2d_with_indices(x.to(dt).reshape({shape[0], shape[1] * D, H, W}), {2, 2}, {2, 2});
      const std::vector<double> got = y.to_vector<double>();
      CHECK(mismatches(got, want) == 0);
      CHECK(i.to_vector<int64_t>() == want_i);
    }
  }
}
