// The vectorized CPU reduction paths: the float32 group sums and 32-lane
// double sums (ops/cpu/sum_float.h, ops/cpu/sum_span.h: sum, mean, global
// average pooling), the eight-row column sums (mean over channels of NCHW) and
// the lane-parallel max/min scan. Values against long-double references
// (float32 sums within the kernel's bound, 4 float32 ulps of sum |x| plus the
// final rounding: see check_close), every length around the lane counts and
// tails, non-contiguous views, float64, int64, uint8, NaN and infinities,
// empty inputs, 1 vs 2 threads bit for bit. tests/test_sum_float32.cpp has
// the float32 kernel's own tests (every element counted once, the vector
// versions against the portable one, accuracy against PyTorch's).
#include <cmath>
#include <limits>
#include <vector>

#include "minidl/core/parallel.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

using LD = long double;

// float32: |got - want| <= 4 u sum|x| + (n / 256 + 32) 2^-53 sum|x| + one ulp
// of want. The float32 kernel (ops/cpu/sum_float.h) rounds each group of 256
// values pairwise in float32, 4 levels of relative error u = 2^-24 on sums of
// |x|; the double accumulation adds one 2^-53 per group, per leftover vector
// and per lane combination (and per chunk partial); the ulp covers the final
// rounding to float32 (and the mean's scaling). Column sums accumulate every
// value in double: well inside. float64: within 1e-13 of sum |x|.
// sum_abs is scaled as want is (by 1/n for means).
void check_close(double got, LD want, LD sum_abs, int64_t n, DType dt) {
  LD tol = 1e-13L * (sum_abs + 1);
  if (dt == kFloat32) {
    const LD ulp = static_cast<LD>(std::nextafter(std::abs(static_cast<float>(want)), INFINITY)) -
                   std::abs(static_cast<float>(want));
    tol = 4 * std::ldexp(1.0L, -24) * sum_abs + (static_cast<LD>(n) / 256 + 32) * std::ldexp(1.0L, -53) * sum_abs + ulp;
  }
  CHECK_MESSAGE(std::abs(static_cast<LD>(got) - want) <= tol, "got ", got, " want ", static_cast<double>(want));
}

// Sums of rows of `x` (2-D, any strides) along dim 1, against long double.
void check_row_sums(const Tensor& x, double scale, const Tensor& got) {
  const std::vector<double> v = x.contiguous().to_vector<double>(), g = got.to_vector<double>();
  const int64_t R = x.shape()[0], C = x.shape()[1];
  for (int64_t r = 0; r < R; ++r) {
    LD s = 0, a = 0;
    for (int64_t c = 0; c < C; ++c) s += v[r * C + c], a += std::abs(v[r * C + c]);
    check_close(g[r], s * scale, a * std::abs(scale), C, x.dtype());
  }
}

std::vector<int64_t> lengths() {
  std::vector<int64_t> n;
  for (int64_t i = 1; i <= 70; ++i) n.push_back(i);  // every tail of 32 and 64 lanes
  for (int64_t i : {127, 128, 129, 255, 256, 257, 1000, 4096, 16383, 16384, 16385, 40001}) n.push_back(i);
  return n;
}

}  // namespace

TEST_CASE("row sums and means at every tail length, float32 and float64, contiguous and strided") {
  manual_seed(0);
  for (DType dt : {kFloat32, kFloat64})
    for (int64_t n : lengths()) {
      CAPTURE(n);
      const Tensor x = (randn({3, n}) * 10 + 3).to(dt);
      check_row_sums(x, 1.0, x.sum({1}));
      check_row_sums(x, 1.0 / static_cast<double>(n), x.mean({1}));
      const Tensor xt = (randn({n, 3}) * 10 - 1).to(dt).t();  // rows with stride 3
      check_row_sums(xt, 1.0, xt.sum({1}));
      // A window with an offset: rows start mid-buffer.
      const Tensor w = randn({5, n + 9}).to(dt).narrow(0, 1, 3).narrow(1, 7, n);
      check_row_sums(w, 1.0, w.sum({1}));
      check_row_sums(w.reshape({1, -1}), 1.0, w.sum().reshape({1}));
    }
}

TEST_CASE("whole-tensor float32 sum of 1M values is within the bound of the long-double sum") {
  manual_seed(1);
  const Tensor x = randn({1000003}) * 100 + 0.1;
  check_row_sums(x.reshape({1, -1}), 1.0, x.sum().reshape({1}));
  const std::vector<float> ramp(1 << 20, 0.1f);  // where one float32 running sum drifts by percents
  const Tensor r = tensor(ramp);
  check_row_sums(r.reshape({1, -1}), 1.0, r.sum().reshape({1}));
}

TEST_CASE("integer sums are exact") {
  std::vector<int64_t> v(3 * 1003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<int64_t>(i) * 7919 % 2003 - 1000) * (1LL << 40);
  const Tensor x = tensor(v, {3, 1003});
  const std::vector<int64_t> got = x.sum({1}).to_vector<int64_t>();
  for (int64_t r = 0; r < 3; ++r) {
    int64_t want = 0;
    for (int64_t c = 0; c < 1003; ++c) want += v[r * 1003 + c];
    CHECK(got[r] == want);
  }
  std::vector<uint8_t> u(77);
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(200 + i % 50);
  int64_t want = 0;
  for (uint8_t b : u) want += b;
  CHECK(tensor(u).sum().item<int64_t>() == want);
}

TEST_CASE("column sums (mean over dim 1 of [A, R, B]) for R around the eight-row step and B around the block") {
  manual_seed(2);
  for (DType dt : {kFloat32, kFloat64})
    for (int64_t R : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 23})
      for (int64_t B : {2, 5, 33, 784, 1023, 1024, 1025, 2100}) {
        CAPTURE(R);
        CAPTURE(B);
        const Tensor x = (randn({2, R, B}) * 5 + 2).to(dt);
        // [A, R, B] -> rows of R: the same sums, read through a permuted view.
        const Tensor rows = x.permute({0, 2, 1}).reshape({2 * B, R});
        check_row_sums(rows, 1.0 / static_cast<double>(R), x.mean({1}).reshape({2 * B}));
        check_row_sums(rows, 1.0, x.sum({1}).reshape({2 * B}));
      }
  std::vector<int64_t> v(2 * 6 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i * i) * (1LL << 45);
  const std::vector<int64_t> got = tensor(v, {2, 6, 5}).sum({1}).to_vector<int64_t>();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 5; ++b) {
      int64_t want = 0;
      for (int64_t r = 0; r < 6; ++r) want += v[(a * 6 + r) * 5 + b];
      CHECK(got[a * 5 + b] == want);
    }
}

TEST_CASE("amax and amin at every tail length, extreme in any lane, float32 float64 int64 uint8") {
  manual_seed(3);
  for (int64_t n : lengths()) {
    if (n > 4096) continue;
    CAPTURE(n);
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {  // first, a middle lane, the tail
      for (DType dt : {kFloat32, kFloat64, kInt64}) {
        Tensor x = (randn({2, n}) * 100).to(dt);
        x.select(0, 0).narrow(0, at, 1).fill_(1e6);
        x.select(0, 1).narrow(0, at, 1).fill_(-1e6);
        const std::vector<double> mx = amax(x, {1}).to_vector<double>(), mn = amin(x, {1}).to_vector<double>();
        const std::vector<double> v = x.to_vector<double>();
        double want_max1 = v[n], want_min0 = v[0];
        for (int64_t j = 0; j < n; ++j) want_max1 = std::max(want_max1, v[n + j]), want_min0 = std::min(want_min0, v[j]);
        CHECK(mx[0] == 1e6);
        CHECK(mn[1] == -1e6);
        CHECK(mx[1] == want_max1);
        CHECK(mn[0] == want_min0);
        CHECK(max(x, 1).indices.to_vector<int64_t>()[0] == at);
        CHECK(argmax(x, 1).to_vector<int64_t>()[0] == at);
      }
      std::vector<uint8_t> u(static_cast<size_t>(n), 100);
      u[static_cast<size_t>(at)] = 255;
      CHECK(amax(tensor(u), {0}).item<int64_t>() == 255);
      u[static_cast<size_t>(at)] = 0;
      CHECK(amin(tensor(u), {0}).item<int64_t>() == 0);
    }
  }
}

TEST_CASE("amax propagates NaN from any lane; infinities and strided rows") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (int64_t n : {1, 5, 63, 64, 65, 130, 1000})
    for (int64_t at : {int64_t{0}, n / 3, n - 1})
      for (DType dt : {kFloat32, kFloat64}) {
        CAPTURE(n);
        CAPTURE(at);
        Tensor x = randn({n}).to(dt);
        x.narrow(0, at, 1).fill_(nan);
        CHECK(std::isnan(amax(x, {0}).item<double>()));
        CHECK(std::isnan(amin(x, {0}).item<double>()));
        CHECK(max(x, 0).indices.item<int64_t>() == at);
        x.narrow(0, at, 1).fill_(-inf);
        CHECK(amin(x, {0}).item<double>() == -inf);
        if (n > 1) CHECK(amax(x, {0}).item<double>() > -inf);
        CHECK(amax(full({n}, -inf, dt), {0}).item<double>() == -inf);
      }
  manual_seed(4);
  const Tensor base = randn({70, 90});
  const Tensor view = base.narrow(0, 5, 60).narrow(1, 3, 81).t();  // rows of stride 90, offset
  const std::vector<double> got = amax(view, {1}).to_vector<double>(), v = view.contiguous().to_vector<double>();
  for (int64_t r = 0; r < 81; ++r) {
    double m = v[r * 60];
    for (int64_t c = 1; c < 60; ++c) m = std::max(m, v[r * 60 + c]);
    CHECK(got[r] == m);
  }
}

TEST_CASE("amax and amin when the float NaN check's sum is NaN without a NaN: both infinities, overflow") {
  // The float path notices NaN through a running sum (ops/cpu/reduce.cpp's
  // floating_extremum); +inf + -inf and overflows of both signs make that sum
  // NaN too, and the exact rescan must then give the right extreme.
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {kFloat32, kFloat64})
    for (int64_t n : {2, 65, 200, 4096}) {
      CAPTURE(n);
      Tensor x = randn({n}).to(dt);
      x.narrow(0, 0, 1).fill_(inf);
      x.narrow(0, n - 1, 1).fill_(-inf);
      CHECK(amax(x, {0}).item<double>() == inf);
      CHECK(amin(x, {0}).item<double>() == -inf);
      CHECK(max(x, 0).indices.item<int64_t>() == 0);
      const double big = dt == kFloat32 ? 3e38 : 1.7e308;
      Tensor y = full({n}, big, dt);
      y.narrow(0, n / 2, n - n / 2).fill_(-big);
      y.narrow(0, n / 2, 1).fill_(-big * 0.5);
      CHECK(amax(y, {0}).item<double>() == static_cast<double>(y.to_vector<double>()[0]));
      CHECK(amin(y, {0}).item<double>() == static_cast<double>(y.to_vector<double>()[n - 1]));
      CHECK(max(y, 0).indices.item<int64_t>() == 0);
    }
}

TEST_CASE("global average pooling is the long-double plane mean, float32 and float64") {
  manual_seed(5);
  for (DType dt : {kFloat32, kFloat64})
    for (auto [h, w] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 7}, {4, 8}, {5, 7}, {3, 11}, {28, 28}}) {
      CAPTURE(h * w);
      const Tensor x = (randn({2, 3, h, w}) * 4 + 1).to(dt);
      check_row_sums(x.reshape({6, h * w}), 1.0 / static_cast<double>(h * w),
                     adaptive_avg_pool2d(x, {1, 1}).reshape({6}));
      const Tensor xt = x.transpose(2, 3);  // non-contiguous input
      check_row_sums(xt.contiguous().reshape({6, h * w}), 1.0 / static_cast<double>(h * w),
                     adaptive_avg_pool2d(xt, {1, 1}).reshape({6}));
    }
  CHECK(adaptive_avg_pool2d(zeros({0, 3, 5, 5}), {1, 1}).shape() == Shape{0, 3, 1, 1});
}

TEST_CASE("empty reductions") {
  CHECK(zeros({0}).sum().item<double>() == 0.0);
  CHECK(zeros({3, 0}).sum({1}).to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(zeros({0, 4}).sum({0}).to_vector<double>() == std::vector<double>{0, 0, 0, 0});
  CHECK(amax(zeros({0, 4}), {1}).numel() == 0);
}

TEST_CASE("fast paths give the same bits at 1 and 2 threads") {
  manual_seed(6);
  const Tensor x = randn({8, 64, 28, 28}), m = randn({300, 5000});
  auto run = [&] {
    std::vector<std::vector<float>> r;
    r.push_back(x.sum().reshape({1}).to_vector<float>());
    r.push_back(x.mean({1}).to_vector<float>());
    r.push_back(m.sum({1}).to_vector<float>());
    r.push_back(amax(m, {1}).to_vector<float>());
    r.push_back(adaptive_avg_pool2d(x, {1, 1}).to_vector<float>());
    return r;
  };
  const int saved = get_num_threads();
  set_num_threads(1);
  const auto one = run();
  set_num_threads(2);
  const auto two = run();
  set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) CHECK(one[i] == two[i]);
}
