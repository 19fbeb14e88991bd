// 2-D pooling: values against direct window loops written here (and a few
// numbers PyTorch printed), argmax routing on ties and padding, gradient
// checks on odd shapes, float32, the parallel path, error paths.
#include <cmath>
#include <limits>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;

namespace {

struct Window {
  int64_t kH, kW, sH, sW, pH, pW;
};

// Deterministic input whose values PyTorch saw too: x[i] = 2 sin(0.7 i + 0.3).
Tensor sine_input(const Shape& shape, DType dtype = kFloat64) {
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 2.0 * std::sin(0.7 * static_cast<double>(i) + 0.3);
  return tensor(v, shape, dtype);
}

Tensor random_input(const Shape& shape, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, kFloat64).requires_grad_();
}

// Pooled planes of `x` (planes x H x W, row-major), by brute force over each window.
// mode: "max", "avg" (count_include_pad), "avg_nopad".
std::vector<double> ref_pool(const std::vector<double>& x, int64_t planes, int64_t H, int64_t W, Window c,
                             const std::string& mode) {
  const int64_t OH = (H + 2 * c.pH - c.kH) / c.sH + 1, OW = (W + 2 * c.pW - c.kW) / c.sW + 1;
  std::vector<double> out;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t in_padded = 0, in_input = 0;
        for (int64_t i = 0; i < c.kH; ++i)
          for (int64_t j = 0; j < c.kW; ++j) {
            const int64_t h = oh * c.sH - c.pH + i, w = ow * c.sW - c.pW + j;
            if (h >= -c.pH && h < H + c.pH && w >= -c.pW && w < W + c.pW) ++in_padded;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const double v = x[(p * H + h) * W + w];
            best = std::max(best, v);
            sum += v;
            ++in_input;
          }
        if (mode == "max") out.push_back(best);
        if (mode == "avg") out.push_back(sum / static_cast<double>(in_padded));
        if (mode == "avg_nopad") out.push_back(sum / static_cast<double>(in_input));
      }
  return out;
}

// Adaptive pooling with bins [floor(i*H/OH), ceil((i+1)*H/OH)), computed in floating point.
std::vector<double> ref_adaptive(const std::vector<double>& x, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW, bool max) {
  auto lo = [](int64_t i, int64_t in, int64_t out) {
    return static_cast<int64_t>(std::floor(static_cast<double>(i * in) / static_cast<double>(out)));
  };
  auto hi = [](int64_t i, int64_t in, int64_t out) {
    return static_cast<int64_t>(std::ceil(static_cast<double>((i + 1) * in) / static_cast<double>(out)));
  };
  std::vector<double> out;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t n = 0;
        for (int64_t h = lo(oh, H, OH); h < hi(oh, H, OH); ++h)
          for (int64_t w = lo(ow, W, OW); w < hi(ow, W, OW); ++w) {
            best = std::max(best, x[(p * H + h) * W + w]);
            sum += x[(p * H + h) * W + w];
            ++n;
          }
        out.push_back(max ? best : sum / static_cast<double>(n));
      }
  return out;
}

void check_values(const Tensor& got, const std::vector<double>& want, double tol = 1e-12) {
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i)
    CHECK_MESSAGE(std::abs(v[i] - want[i]) <= tol * (1 + std::abs(want[i])), "element ", i, ": ", v[i], " vs ",
                  want[i]);
}

std::string describe(const Window& c) {
  return "kernel " + std::to_string(c.kH) + "x" + std::to_string(c.kW) + " stride " + std::to_string(c.sH) + "x" +
         std::to_string(c.sW) + " pad " + std::to_string(c.pH) + "x" + std::to_string(c.pW);
}

Tensor pool(const Tensor& x, Window c, const std::string& mode) {
  if (mode == "max") return max_pool2d(x, {c.kH, c.kW}, {c.sH, c.sW}, {c.pH, c.pW});
  return avg_pool2d(x, {c.kH, c.kW}, {c.sH, c.sW}, {c.pH, c.pW}, false, mode == "avg");
}

const Window kWindows[] = {
    {3, 3, 2, 2, 1, 1},  // the ResNet stem pool
    {2, 2, 2, 2, 0, 0},  // the plain 2x2 pool
    {2, 3, 1, 2, 1, 1},  // rectangular, unequal strides
    {3, 2, 3, 1, 0, 1},  // stride > kernel on one side
    {1, 1, 2, 2, 0, 0},  // subsampling
};

}  // namespace

TEST_CASE("max_pool2d and avg_pool2d match direct window loops") {
  const Tensor x = random_input({2, 3, 7, 6}, 1);
  const std::vector<double> xv = x.to_vector<double>();
  for (const std::string mode : {"max", "avg", "avg_nopad"})
    for (const Window& c : kWindows) {
      CAPTURE(mode);
      const std::string window = describe(c);
      CAPTURE(window);
      const Tensor y = pool(x, c, mode);
      const int64_t OH = (7 + 2 * c.pH - c.kH) / c.sH + 1, OW = (6 + 2 * c.pW - c.kW) / c.sW + 1;
      CHECK(y.shape() == Shape{2, 3, OH, OW});
      check_values(y, ref_pool(xv, 6, 7, 6, c, mode));
    }
}

TEST_CASE("pooling takes unbatched CHW input") {
  const Tensor x = random_input({3, 7, 6}, 2);
  const Window c{3, 3, 2, 2, 1, 1};
  for (const std::string mode : {"max", "avg", "avg_nopad"}) {
    const Tensor y = pool(x, c, mode);
    CHECK(y.shape() == Shape{3, 4, 3});
    check_values(y, ref_pool(x.to_vector<double>(), 3, 7, 6, c, mode));
  }
  CHECK(adaptive_avg_pool2d(x, {2, 4}).shape() == Shape{3, 2, 4});
  CHECK(adaptive_max_pool2d(x, {2, 4}).shape() == Shape{3, 2, 4});
}

TEST_CASE("stride defaults to the kernel size") {
  const Tensor x = random_input({1, 2, 6, 6}, 3);
  CHECK(allclose(max_pool2d(x, {2, 3}), max_pool2d(x, {2, 3}, {2, 3})));
  CHECK(allclose(avg_pool2d(x, {3, 2}), avg_pool2d(x, {3, 2}, {3, 2})));
  CHECK(max_pool2d(x, {2, 3}).shape() == Shape{1, 2, 3, 2});
}

TEST_CASE("pooling agrees with values PyTorch printed") {
  // torch.nn.functional on x = 2 sin(0.7 i + 0.3), shape (2, 3, 7, 6), float64.
  const Tensor x = sine_input({2, 3, 7, 6});
  auto plane = [](const Tensor& y, int64_t n, int64_t c) { return y.select(0, n).select(0, c); };
  check_values(plane(max_pool2d(x, {3, 3}, {2, 2}, {1, 1}), 1, 2),
               {1.972094679883977, 1.972094679883977, 0.6632773561035414, 1.972094679883977, 1.972094679883977,
                1.9774137541003032, 1.9821737595970998, 1.9821737595970998, 1.986373350591177, 0.5672954647098292,
                1.3691153070304483, 1.986373350591177});
  check_values(plane(avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}), 1, 2),
               {0.3649108667499483, -0.002016469291463855, -0.5596810409051945, -0.006970183725427866,
                0.00022300265001162778, 0.010826141716680948, 0.007199595290228104, 0.009239942799980132,
                -0.004219528083623519, -0.37644563951761456, -0.4737787486762656, 0.22750167981927});
  check_values(plane(avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, false, false), 1, 2),
               {0.8210494501873837, -0.003024703937195783, -0.8395215613577918, -0.0104552755881418,
                0.00022300265001162778, 0.010826141716680948, 0.010799392935342156, 0.009239942799980132,
                -0.004219528083623519, -0.8470026889146327, -0.7106681230143984, 0.34125251972890497});
  check_values(plane(adaptive_avg_pool2d(x, {4, 4}), 0, 1),
               {-0.635384508794103, -0.9396261005392061, -0.28709947299996696, 0.36277527734285897,
                0.008322752175296618, 0.012110703261184205, 0.003496362568856474, -0.004854470178971486,
                0.003299373033740838, -0.005041943753021805, -0.011802872677340431, -0.007042714299359321,
                -0.24115308084535508, 0.406502140025713, 0.9135742543200285, 0.5345072091703168});
  check_values(plane(adaptive_max_pool2d(x, {4, 4}), 0, 1),
               {1.2223102925252034, -0.08493606943388884, 1.7677408470916547, 1.9546850247845202, 1.7832197460828814,
                1.9472909113899595, 1.7981944802891578, 1.9393462458238415, 1.8126608159453215, 1.9308532742594873,
                1.7981944802891578, 1.9393462458238415, 1.8126608159453215, 1.9308532742594873, 1.8266146630243236,
                1.921814397891245});
}

TEST_CASE("max_pool2d treats padding as -inf and routes the gradient to the first maximum") {
  // All values equal and negative: a zero-padded pool would output 0.
  Tensor x = full({1, 1, 4, 4}, -3.0, kFloat64).requires_grad_();
  Tensor y = max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  REQUIRE(y.shape() == Shape{1, 1, 2, 2});
  for (double v : y.to_vector<double>()) CHECK(v == -3.0);
  y.backward(ones_like(y));
  // Windows start at (-1,-1), (-1,1), (1,-1), (1,1); the first in-bounds element of each wins.
  std::vector<double> want(16, 0.0);
  want[0 * 4 + 0] = 1, want[0 * 4 + 1] = 1, want[1 * 4 + 0] = 1, want[1 * 4 + 1] = 1;
  check_values(x.grad(), want);

  // Overlapping windows that share a maximum add their gradients there.
  Tensor z = tensor({0, 1, 0, 0, 9, 0, 0, 0, 0}, {1, 3, 3}, kFloat64).requires_grad_();
  Tensor m = max_pool2d(z, {2, 2}, {1, 1});
  check_values(m, {9, 9, 9, 9});
  m.backward(tensor({1, 2, 3, 4}, {1, 2, 2}, kFloat64));
  check_values(z.grad(), {0, 0, 0, 0, 10, 0, 0, 0, 0});
}

TEST_CASE("a max-pool window with no tap inside the input: -inf, PyTorch's index, no gradient") {
  // Kernel 2 dilated by 2 with padding 1 on a 1x1 plane taps (-1, 1): both
  // outside. PyTorch gives -inf and index 2 (past the plane) and a zero
  // gradient; the backward must not write at that index (it did: past gx).
  for (const DType dt : {kFloat64, kFloat32, kBFloat16}) {
    for (const bool cl : {false, true}) {
      CAPTURE(dt);
      CAPTURE(cl);
      Tensor x = full({2, 3, 1, 1}, 5.0, dt);
      if (cl) x = x.contiguous(MemoryFormat::ChannelsLast);
      x.requires_grad_();
      const auto [y, idx] = max_pool2d_with_indices(x, {2, 2}, {3, 3}, {1, 1}, {2, 2});
      REQUIRE(y.shape() == Shape{2, 3, 1, 1});
      for (double v : y.to(kFloat64).to_vector<double>()) CHECK(v == -std::numeric_limits<double>::infinity());
      for (int64_t i : idx.to_vector<int64_t>()) CHECK(i == 2);
      y.backward(ones_like(y));
      for (double g : x.grad().to(kFloat64).to_vector<double>()) CHECK(g == 0.0);
    }
  }
  // 3-D: the same window along W (no accepted geometry mixes such windows
  // with windows that have taps: padding is at most half the kernel).
  Tensor u = full({1, 2, 1, 1, 1}, 5.0, kFloat64).requires_grad_();
  Tensor e = max_pool3d(u, {1, 1, 2}, {1, 1, 3}, {0, 0, 1}, {1, 1, 2});
  e.backward(ones_like(e));
  for (double v : e.to_vector<double>()) CHECK(v == -std::numeric_limits<double>::infinity());
  check_values(u.grad(), {0, 0});
}

TEST_CASE("a max-pool window with no tap whose index names a real element routes no gradient") {
  // Kernel 2 dilated by 2 with padding 1 along a 1-wide W taps columns -1
  // and 1: none. PyTorch's index of row h is h * 1 + 1, the next row's
  // element (or past the plane for the last row). The output depends on no
  // input, so its gradient is 0. (PyTorch 2.15's CPU backward adds dy to
  // the named element, and for the last row past the plane: on this input it
  // corrupts the heap, "double free or corruption".)
  for (const DType dt : {kFloat64, kFloat32, kBFloat16}) {
    for (const bool cl : {false, true}) {
      for (const int64_t stride : {1, 3}) {  // overlapping (CUDA: a gather) and disjoint windows (a scatter)
        CAPTURE(dt);
        CAPTURE(cl);
        CAPTURE(stride);
        Tensor x = arange(0, 18, 1, dt).reshape({2, 3, 3, 1});
        if (cl) x = x.contiguous(MemoryFormat::ChannelsLast);
        x.requires_grad_();
        const auto [y, idx] = max_pool2d_with_indices(x, {1, 2}, {1, stride}, {0, 1}, {1, 2});
        REQUIRE(y.shape() == Shape{2, 3, 3, 1});
        for (double v : y.to(kFloat64).to_vector<double>()) CHECK(v == -std::numeric_limits<double>::infinity());
        const std::vector<int64_t> expected_idx = {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3};
        CHECK(idx.contiguous().to_vector<int64_t>() == expected_idx);
        y.backward(arange(1, 19, 1, dt).reshape({2, 3, 3, 1}));
        for (double g : x.grad().to(kFloat64).to_vector<double>()) CHECK(g == 0.0);
      }
    }
  }
  Tensor u = arange(0, 6, 1, kFloat64).reshape({1, 1, 2, 3, 1}).requires_grad_();  // 3-D: the same along W
  Tensor e = max_pool3d(u, {1, 1, 2}, {1, 1, 1}, {0, 0, 1}, {1, 1, 2});
  e.backward(ones_like(e));
  check_values(u.grad(), {0, 0, 0, 0, 0, 0});
}

TEST_CASE("max pools propagate NaN") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor({nan, 1, 2, 3}, {1, 1, 2, 2}, kFloat64);
  CHECK(std::isnan(max_pool2d(x, {2, 2}).item<double>()));
  CHECK(std::isnan(adaptive_max_pool2d(x, {1, 1}).item<double>()));
}

TEST_CASE("adaptive pools match floor/ceil bins") {
  const Tensor x = random_input({2, 3, 7, 6}, 4);
  const std::vector<double> xv = x.to_vector<double>();
  const std::array<int64_t, 2> sizes[] = {{1, 1}, {3, 2}, {4, 4}, {7, 6}, {9, 8}, {1, 5}, {2, 1}};
  for (const auto& os : sizes) {
    const std::string output_size = std::to_string(os[0]) + "x" + std::to_string(os[1]);
    CAPTURE(output_size);
    const Tensor a = adaptive_avg_pool2d(x, os), m = adaptive_max_pool2d(x, os);
    CHECK(a.shape() == Shape{2, 3, os[0], os[1]});
    check_values(a, ref_adaptive(xv, 6, 7, 6, os[0], os[1], false));
    check_values(m, ref_adaptive(xv, 6, 7, 6, os[0], os[1], true));
  }
  // Output size 0 gives an empty output and a zero gradient, as in PyTorch.
  Tensor e = adaptive_avg_pool2d(x, {0, 2});
  CHECK(e.shape() == Shape{2, 3, 0, 2});
  e.backward(zeros_like(e));
  for (double g : x.grad().to_vector<double>()) CHECK(g == 0.0);
}

TEST_CASE("global average pooling is the plane mean, forward and backward") {
  Tensor x = random_input({3, 5, 7, 6}, 5);
  Tensor y = adaptive_avg_pool2d(x, {1, 1});
  REQUIRE(y.shape() == Shape{3, 5, 1, 1});
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (int64_t p = 0; p < 15; ++p) {
    double s = 0;
    for (int64_t i = 0; i < 42; ++i) s += xv[p * 42 + i];
    CHECK(yv[p] == doctest::Approx(s / 42).epsilon(1e-13));
  }
  y.backward(ones_like(y));
  for (double g : x.grad().to_vector<double>()) CHECK(g == doctest::Approx(1.0 / 42));
}

TEST_CASE("pooling gradients match finite differences") {
  for (const std::string mode : {"max", "avg", "avg_nopad"})
    for (const Window& c : kWindows) {
      CAPTURE(mode);
      const std::string window = describe(c);
      CAPTURE(window);
      check_gradients([&](const std::vector<Tensor>& in) { return pool(in[0], c, mode); },
                      {random_input({2, 3, 7, 6}, 6)});
    }
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return max_pool2d(in[0], {3, 2}, {2, 1}, {1, 1});
      },
      {random_input({3, 5, 6}, 7)});  // unbatched
  const std::array<int64_t, 2> sizes[] = {{1, 1}, {3, 2}, {4, 4}, {9, 8}};
  for (const auto& os : sizes) {
    const std::string output_size = std::to_string(os[0]) + "x" + std::to_string(os[1]);
    CAPTURE(output_size);
    check_gradients([&](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], os); },
                    {random_input({2, 3, 7, 6}, 8)});
    check_gradients([&](const std::vector<Tensor>& in) { return adaptive_max_pool2d(in[0], os); },
                    {random_input({2, 3, 7, 6}, 9)});
  }
}

TEST_CASE("pooling takes non-contiguous input") {
  const Tensor x = random_input({2, 3, 6, 7}, 10);
  const Tensor xt = x.transpose(2, 3);  // (2, 3, 7, 6), strided
  REQUIRE(!xt.is_contiguous());
  const Tensor xc = xt.contiguous();
  CHECK(allclose(max_pool2d(xt, {3, 3}, {2, 2}, {1, 1}), max_pool2d(xc, {3, 3}, {2, 2}, {1, 1})));
  CHECK(allclose(avg_pool2d(xt, {2, 3}, {1, 2}, {1, 1}), avg_pool2d(xc, {2, 3}, {1, 2}, {1, 1})));
  CHECK(allclose(adaptive_avg_pool2d(xt, {3, 4}), adaptive_avg_pool2d(xc, {3, 4})));
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return max_pool2d(in[0].transpose(2, 3), {3, 3}, {2, 2}, {1, 1});
      },
      {x});
}

TEST_CASE("float32 pooling agrees with float64, also on the parallel path") {
  // 8 * 16 planes of 32x32: large enough for the OpenMP branches.
  const Tensor x64 = random_input({8, 16, 32, 32}, 11);
  const Tensor x32 = x64.to(kFloat32);
  const std::vector<double> xv = x64.to_vector<double>();
  const Window c{3, 3, 2, 2, 1, 1};
  for (const std::string mode : {"max", "avg", "avg_nopad"}) {
    CAPTURE(mode);
    const std::vector<double> want = ref_pool(xv, 128, 32, 32, c, mode);
    check_values(pool(x64, c, mode), want);
    const Tensor y32 = pool(x32, c, mode);
    CHECK(y32.dtype() == kFloat32);
    check_values(y32, want, 1e-6);
  }
  check_values(adaptive_avg_pool2d(x32, {1, 1}), ref_adaptive(xv, 128, 32, 32, 1, 1, false), 1e-6);
  check_values(adaptive_max_pool2d(x32, {5, 3}), ref_adaptive(xv, 128, 32, 32, 5, 3, true), 1e-6);

  // Parallel backward: max pool with a 2x2/2 window touches every input once.
  Tensor x = x64.detach().requires_grad_();
  Tensor y = max_pool2d(x, {2, 2});
  y.backward(ones_like(y));
  double total = 0;
  for (double g : x.grad().to_vector<double>()) total += g;
  CHECK(total == static_cast<double>(y.numel()));
}

TEST_CASE("pooling an empty batch gives an empty output") {
  Tensor x = zeros({0, 3, 5, 5}, kFloat64).requires_grad_();
  CHECK(max_pool2d(x, {2, 2}).shape() == Shape{0, 3, 2, 2});
  CHECK(avg_pool2d(x, {2, 2}).shape() == Shape{0, 3, 2, 2});
  CHECK(adaptive_avg_pool2d(x, {3, 3}).shape() == Shape{0, 3, 3, 3});
  CHECK(adaptive_max_pool2d(x, {3, 3}).shape() == Shape{0, 3, 3, 3});
}

TEST_CASE("pooling argument errors") {
  const Tensor x = zeros({2, 3, 5, 5});
  CHECK_THROWS_CONTAINS(
      max_pool2d(x, {3, 3}, {1, 1}, {2, 2}),
      "pad should be at most half of effective kernel size, but got pad=2, kernel_size=3 and dilation=1");
  CHECK_THROWS_CONTAINS(avg_pool2d(x, {3, 3}, {1, 1}, {2, 2}), "pad should be at most half");
  CHECK_THROWS_CONTAINS(
      max_pool2d(zeros({2, 3}), {2, 2}),
      "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got:[2, 3]");
  CHECK_THROWS_CONTAINS(avg_pool2d(zeros({1, 2, 3, 4, 5}), {2, 2}), "Expected 3D or 4D");
  CHECK_THROWS_CONTAINS(max_pool2d(zeros({1, 0, 4, 4}), {2, 2}), "but got:[1, 0, 4, 4]");
  CHECK_THROWS_CONTAINS(max_pool2d(zeros({1, 3, 2, 2}), {3, 3}),
                        "Given input size: (3x2x2). Calculated output size: (3x0x0). Output size is too small");
  CHECK_THROWS_CONTAINS(avg_pool2d(zeros({1, 3, 2, 2}), {3, 3}, {2, 2}), "Output size is too small");
  CHECK_THROWS_CONTAINS(max_pool2d(x, {0, 2}), "kernel size should be greater than zero, but got kH: 0 kW: 2");
  CHECK_THROWS_CONTAINS(avg_pool2d(x, {2, -1}), "kernel size should be greater than zero");
  CHECK_THROWS_CONTAINS(max_pool2d(x, {2, 2}, {-1, 2}), "stride should be greater than zero, but got dH: -1 dW: 2");
  CHECK_THROWS_CONTAINS(max_pool2d(x, {2, 2}, {0, 2}), "stride should be greater than zero");
  CHECK_THROWS_CONTAINS(max_pool2d(x, {2, 2}, {1, 1}, {-1, 0}), "pad must be non-negative, but got pad: -1");
  CHECK_THROWS_CONTAINS(max_pool2d(zeros({1, 1, 4, 4}, kInt64), {2, 2}), "max_pool2d: expected a floating point");
  CHECK_THROWS_CONTAINS(max_pool2d(Tensor(), {2, 2}), "max_pool2d: expected a defined input tensor");

  CHECK_THROWS_CONTAINS(adaptive_avg_pool2d(zeros({2, 3}), {2, 2}),
                        "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got: [2, 3]");
  CHECK_THROWS_CONTAINS(adaptive_max_pool2d(zeros({2, 3}), {2, 2}), "adaptive_max_pool2d(): Expected 3D or 4D tensor");
  CHECK_THROWS_CONTAINS(
      adaptive_avg_pool2d(x, {-1, 2}),
      "adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 but received {-1, 2}");
  CHECK_THROWS_CONTAINS(
      adaptive_max_pool2d(zeros({1, 2, 0, 4}), {2, 2}),
      "Expected input to have non-zero size for non-batch dimensions, but input has sizes [1, 2, 0, 4] "
      "with dimension 2 being empty");
  CHECK_THROWS_CONTAINS(adaptive_avg_pool2d(zeros({2, 2, 2}, kInt64), {1, 1}), "expected a floating point");
  CHECK_THROWS_CONTAINS(adaptive_max_pool2d(Tensor(), {1, 1}), "expected a defined input tensor");
}
