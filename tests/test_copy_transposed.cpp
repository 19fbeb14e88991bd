// The tiled copy of transposed views (ops/cpu/transpose_copy.cpp): every
// element against an index loop written here, for sizes around the 8x8
// blocks and 64-byte panels, every element size, views with offsets, a
// strided destination, batched permutes, and 1 vs 2 threads.
#include <limits>
#include <utility>

#include "minidl/core/parallel.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// x (2-D, any strides) transposed and made contiguous, checked element by element.
template <class T>
void check_transpose(const Tensor& x) {
  const Tensor y = x.t().contiguous();
  REQUIRE(y.shape() == Shape{x.shape()[1], x.shape()[0]});
  REQUIRE(y.is_contiguous());
  const std::vector<T> xv = x.contiguous().to_vector<T>(), yv = y.to_vector<T>();
  const int64_t R = x.shape()[0], C = x.shape()[1];
  int64_t bad = 0;
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < R; ++j) bad += !(yv[i * R + j] == xv[j * C + i]);
  CHECK_MESSAGE(bad == 0, "shape ", R, "x", C, ": ", bad, " elements differ");
}

Tensor ramp(const Shape& shape, DType dtype) {
  // Distinct values (within each type's range) so a misplaced element shows.
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<double>(i);
    if (dtype == kUInt8) v[i] = static_cast<double>(i % 251);
    if (dtype == kFloat16 || dtype == kBFloat16) v[i] = static_cast<double>(i % 200) - 100.0;
  }
  return tensor(v, shape).to(dtype);
}

}  // namespace

TEST_CASE("transpose().contiguous() around the block and panel sizes, float32") {
  manual_seed(0);
  // Below 8 (the general loop), exact blocks and panels, tails in either dim.
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{
           {7, 30}, {8, 8}, {9, 17}, {16, 16}, {17, 8}, {8, 23}, {37, 53}, {64, 65}, {129, 31}, {300, 257}})
    check_transpose<float>(randn({r, c}));
}

TEST_CASE("transpose().contiguous() for every element size") {
  for (DType dt : {kFloat64, kInt64, kUInt8, kFloat16, kBFloat16, kFloat32}) {
    CAPTURE(dtype_name(dt));
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{9, 17}, {40, 33}, {16, 71}}) {
      const Tensor x = ramp({r, c}, dt);
      if (dt == kInt64 || dt == kUInt8) {
        check_transpose<int64_t>(x.to(kInt64).to(dt));
      } else {
        check_transpose<double>(x);
      }
    }
  }
  // int64 values beyond double's 53 bits survive the bit copy.
  Tensor big = ramp({12, 10}, kInt64) + 4611686018427387903LL;
  check_transpose<int64_t>(big);
}

TEST_CASE("views with offsets, a strided destination, batched permutes") {
  manual_seed(1);
  // A window of a larger matrix: offset and row stride both non-trivial.
  const Tensor base = randn({40, 50});
  check_transpose<float>(base.narrow(0, 3, 29).narrow(1, 5, 19));
  // Writing into a column window of a wider matrix (dst row stride 40): the rest untouched.
  Tensor wide = full({20, 40}, -7.0);
  const Tensor src = randn({17, 20});
  wide.narrow(1, 3, 17).copy_(src.t());
  const std::vector<float> w = wide.to_vector<float>(), s = src.to_vector<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < 20; ++i)
    for (int64_t j = 0; j < 40; ++j) {
      const float want = (j >= 3 && j < 20) ? s[(j - 3) * 20 + i] : -7.0f;
      bad += !(w[i * 40 + j] == want);
    }
  CHECK(bad == 0);
  // NCHW -> NHWC (merged to [N, HW, C]) and a 4-D permute moving two dims.
  const Tensor x = randn({3, 12, 5, 7});
  const Tensor nhwc = x.permute({0, 2, 3, 1}).contiguous();
  const std::vector<float> xv = x.to_vector<float>(), nv = nhwc.to_vector<float>();
  bad = 0;
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t c = 0; c < 12; ++c)
      for (int64_t hw = 0; hw < 35; ++hw) bad += !(nv[(n * 35 + hw) * 12 + c] == xv[(n * 12 + c) * 35 + hw]);
  CHECK(bad == 0);
  CHECK(x.permute({0, 2, 3, 1}).permute({0, 3, 1, 2}).contiguous().to_vector<float>() == xv);
  // A column broadcast along rows (src strides (1, 0)) takes the same path.
  const Tensor col = randn({37, 1});
  const std::vector<float> cv = col.to_vector<float>(), ev = col.expand({37, 20}).contiguous().to_vector<float>();
  bad = 0;
  for (int64_t i = 0; i < 37; ++i)
    for (int64_t j = 0; j < 20; ++j) bad += !(ev[i * 20 + j] == cv[i]);
  CHECK(bad == 0);
}

TEST_CASE("NaN and infinities copy bit for bit; empty views") {
  Tensor x = randn({16, 24});
  x.narrow(0, 2, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  x.narrow(1, 5, 1).fill_(-std::numeric_limits<double>::infinity());
  const Tensor y = x.t().contiguous();
  const std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < 24; ++i)
    for (int64_t j = 0; j < 16; ++j) {
      const float a = yv[i * 16 + j], b = xv[j * 24 + i];
      bad += !(a == b || (std::isnan(a) && std::isnan(b)));
    }
  CHECK(bad == 0);
  CHECK(zeros({0, 10}).t().contiguous().shape() == Shape{10, 0});
  CHECK(zeros({10, 0}).t().contiguous().numel() == 0);
}

TEST_CASE("transposed copies do not depend on the thread count") {
  manual_seed(2);
  const Tensor x = randn({4, 300, 257});  // several matrices, parallel panels
  const int saved = get_num_threads();
  set_num_threads(1);
  const std::vector<float> one = x.transpose(1, 2).contiguous().to_vector<float>();
  set_num_threads(2);
  const std::vector<float> two = x.transpose(1, 2).contiguous().to_vector<float>();
  set_num_threads(saved);
  CHECK(one == two);
  check_transpose<float>(x.select(0, 3));
}
