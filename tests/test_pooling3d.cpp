// 3-D pooling and the 2-D pooling options (dilation, ceil_mode,
// divisor_override, return_indices): values against direct window loops
// written here, PyTorch's output-size rule, gradient checks on odd shapes,
// float32 on the parallel path, error messages, and the nn layers.
#include <cmath>
#include <limits>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;

namespace {

// One pooling configuration in (D, H, W); 2-D configs have D = (1, 1, 0, 1).
struct Pool {
  Size3 k, s, p, dil{1, 1, 1};
  bool ceil = false, cip = true;
  int64_t divisor = 0;  // 0: none
};

Tensor random_input(const Shape& shape, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, kFloat64).requires_grad_();
}

// PyTorch's output size, written out independently: floor or ceil of
// (in + 2p - dil*(k-1) - 1) / s + 1, minus one if the last window would start
// past the input and its left padding.
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil, bool ceil) {
  const double span = static_cast<double>(in + 2 * p - dil * (k - 1) - 1) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(ceil ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil && (out - 1) * s >= in + p) --out;
  return out;
}

// Brute force over every tap of every window; mode "max" or "avg".
std::vector<double> ref_pool(const std::vector<double>& x, int64_t planes, Size3 in, const Pool& c,
                             const std::string& mode) {
  Size3 out;
  for (int i = 0; i < 3; ++i) out[i] = out_size(in[i], c.k[i], c.s[i], c.p[i], c.dil[i], c.ceil);
  std::vector<double> y;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t od = 0; od < out[0]; ++od)
      for (int64_t oh = 0; oh < out[1]; ++oh)
        for (int64_t ow = 0; ow < out[2]; ++ow) {
          const int64_t o[3] = {od, oh, ow};
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t inside = 0, padded = 1;
          for (int i = 0; i < 3; ++i) {  // the window clipped to the padded input, per dim
            const int64_t start = o[i] * c.s[i] - c.p[i];
            padded *= std::min(start + c.k[i], in[i] + c.p[i]) - start;
          }
          for (int64_t a = 0; a < c.k[0]; ++a)
            for (int64_t b = 0; b < c.k[1]; ++b)
              for (int64_t e = 0; e < c.k[2]; ++e) {
                const int64_t d = od * c.s[0] - c.p[0] + a * c.dil[0], h = oh * c.s[1] - c.p[1] + b * c.dil[1],
                              w = ow * c.s[2] - c.p[2] + e * c.dil[2];
                if (d < 0 || d >= in[0] || h < 0 || h >= in[1] || w < 0 || w >= in[2]) continue;
                const double v = x[static_cast<size_t>(((pl * in[0] + d) * in[1] + h) * in[2] + w)];
                best = std::max(best, v);
                sum += v;
                ++inside;
              }
          if (mode == "max") {
            y.push_back(best);
          } else {
            const int64_t div = c.divisor ? c.divisor : c.cip ? padded : inside;
            y.push_back(inside ? sum / static_cast<double>(div) : 0.0);
          }
        }
  return y;
}

void check_values(const Tensor& got, const std::vector<double>& want, double tol = 1e-12) {
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i)
    CHECK_MESSAGE(std::abs(v[i] - want[i]) <= tol * (1 + std::abs(want[i])), "element ", i, ": ", v[i], " vs ",
                  want[i]);
}

std::string describe(const Pool& c) {
  auto s3 = [](const Size3& a) {
    return std::to_string(a[0]) + "x" + std::to_string(a[1]) + "x" + std::to_string(a[2]);
  };
  return "k " + s3(c.k) + " s " + s3(c.s) + " p " + s3(c.p) + " dil " + s3(c.dil) + (c.ceil ? " ceil" : "") +
         (c.cip ? "" : " nopad") + (c.divisor ? " div " + std::to_string(c.divisor) : "");
}

Size2 hw(const Size3& a) { return {a[1], a[2]}; }

Tensor pool3d(const Tensor& x, const Pool& c, const std::string& mode) {
  if (mode == "max") return max_pool3d(x, c.k, c.s, c.p, c.dil, c.ceil);
  return avg_pool3d(x, c.k, c.s, c.p, c.ceil, c.cip, c.divisor ? std::optional<int64_t>(c.divisor) : std::nullopt);
}

Tensor pool2d(const Tensor& x, const Pool& c, const std::string& mode) {
  if (mode == "max") return max_pool2d(x, hw(c.k), hw(c.s), hw(c.p), hw(c.dil), c.ceil);
  return avg_pool2d(x, hw(c.k), hw(c.s), hw(c.p), c.ceil, c.cip,
                    c.divisor ? std::optional<int64_t>(c.divisor) : std::nullopt);
}

const Pool kPools3d[] = {
    {{2, 2, 2}, {2, 2, 2}, {0, 0, 0}},                                  // the UNet pool
    {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}},                                  // padded, overlapping
    {{2, 3, 2}, {1, 2, 3}, {1, 1, 0}},                                  // anisotropic
    {{2, 2, 3}, {2, 2, 2}, {0, 1, 1}, {1, 1, 1}, true},                 // ceil_mode
    {{3, 3, 2}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, true, false},          // ceil, last window clipped
    {{2, 3, 3}, {1, 2, 2}, {0, 1, 1}, {2, 1, 2}},                       // dilation (max only)
    {{2, 2, 2}, {1, 2, 2}, {1, 0, 1}, {1, 1, 1}, false, true, 3},       // divisor_override
};

const Pool kPools2d[] = {
    {{1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}, true},            // ResNet stem pool with ceil_mode
    {{1, 3, 3}, {1, 3, 3}, {0, 1, 1}, {1, 1, 1}, true, false},     // the last window starts in the padding
    {{1, 2, 2}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}, true},            // ... and one that would start past it
    {{1, 3, 2}, {1, 1, 2}, {0, 1, 1}, {1, 2, 3}},                  // dilation (max only)
    {{1, 2, 3}, {1, 2, 2}, {0, 0, 1}, {1, 3, 2}, true},            // dilation + ceil_mode (max only)
    {{1, 3, 3}, {1, 2, 1}, {0, 1, 1}, {1, 1, 1}, false, true, 4},  // divisor_override
    {{1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}, true, false, 2},  // divisor_override + ceil_mode
};

bool dilated(const Pool& c) { return c.dil != Size3{1, 1, 1}; }

}  // namespace

TEST_CASE("max_pool3d and avg_pool3d match direct window loops") {
  const Tensor x = random_input({2, 3, 6, 7, 5}, 1);
  const std::vector<double> xv = x.to_vector<double>();
  for (const std::string mode : {"max", "avg"})
    for (const Pool& c : kPools3d) {
      if (mode == "avg" && dilated(c)) continue;
      CAPTURE(mode);
      const std::string pool = describe(c);
      CAPTURE(pool);
      const Tensor y = pool3d(x, c, mode);
      Shape want_shape{2, 3};
      for (int i = 0; i < 3; ++i) want_shape.push_back(out_size(x.size(2 + i), c.k[i], c.s[i], c.p[i], c.dil[i], c.ceil));
      CHECK(y.shape() == want_shape);
      check_values(y, ref_pool(xv, 6, {6, 7, 5}, c, mode));
    }
}

TEST_CASE("2-D pools with dilation, ceil_mode and divisor_override match direct window loops") {
  const Tensor x = random_input({2, 3, 7, 6}, 2);
  const std::vector<double> xv = x.to_vector<double>();
  for (const std::string mode : {"max", "avg"})
    for (const Pool& c : kPools2d) {
      if (mode == "avg" && dilated(c)) continue;
      if (mode == "max" && c.divisor) continue;
      CAPTURE(mode);
      const std::string pool = describe(c);
      CAPTURE(pool);
      check_values(pool2d(x, c, mode), ref_pool(xv, 6, {1, 7, 6}, c, mode));
      // A 2-D pool is the 3-D pool of a depth-1 volume.
      CHECK(allclose(pool2d(x, c, mode), pool3d(x.unsqueeze(2), c, mode).squeeze(2), 0, 0));
    }
}

TEST_CASE("ceil_mode follows PyTorch's rule: the last window starts inside the input or left padding") {
  // Numbers PyTorch printed: F.max_pool2d(torch.zeros(1, 1, 5, 5), 2, 2, p, ceil_mode=True).
  CHECK(max_pool2d(zeros({1, 1, 5, 5}), {2, 2}, {2, 2}, {1, 1}, {1, 1}, true).shape() == Shape{1, 1, 3, 3});
  CHECK(max_pool2d(zeros({1, 1, 5, 5}), {2, 2}, {2, 2}, {0, 0}, {1, 1}, true).shape() == Shape{1, 1, 3, 3});
  CHECK(max_pool2d(zeros({1, 1, 5, 5}), {2, 2}, {2, 2}, {0, 0}, {1, 1}, false).shape() == Shape{1, 1, 2, 2});
  CHECK(max_pool3d(zeros({1, 1, 5, 5, 5}), {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {2, 2, 2}, true).shape() ==
        Shape{1, 1, 2, 2, 2});
  // avg with ceil_mode: the clipped last window divides by what is inside the padded input.
  // PyTorch: F.avg_pool2d(torch.ones(1, 1, 5, 5), 2, 2, 1, ceil_mode=True)[0, 0, 0] = [0.25, 0.5, 0.5].
  const Tensor a = avg_pool2d(ones({1, 1, 5, 5}, kFloat64), {2, 2}, {2, 2}, {1, 1}, true, true);
  check_values(a.select(2, 0).flatten(), {0.25, 0.5, 0.5});
  check_values(a.select(2, 2).flatten(), {0.5, 1.0, 1.0});
}

TEST_CASE("avg_pool takes PyTorch's positional order: ceil_mode, then count_include_pad") {
  namespace F = minidl::nn::functional;
  // PyTorch: x = torch.arange(1., 26.).reshape(1, 1, 5, 5); F.avg_pool2d(x, 2, 2, 0, True) (ceil_mode) and
  // F.avg_pool2d(x, 2, 2, 1, False, True) (count_include_pad).
  const Tensor x = arange(1, 26, 1, kFloat64).reshape({1, 1, 5, 5});
  const std::vector<double> ceil_want{4.0, 6.0, 7.5, 14.0, 16.0, 17.5, 21.5, 23.5, 25.0};
  const std::vector<double> include_pad_want{0.25, 1.25, 2.25, 4.25, 10.0, 12.0, 9.25, 20.0, 22.0};
  check_values(F::avg_pool2d(x, 2, 2, 0, true), ceil_want);
  check_values(avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}, true), ceil_want);
  check_values(F::avg_pool2d(x, 2, 2, 1, false, true), include_pad_want);
  check_values(avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, false, true), include_pad_want);
  check_values(F::avg_pool2d(x, 2, 2, 1, false, false).flatten().narrow(0, 0, 3), {1.0, 2.5, 4.5});
  // 3-D: F.avg_pool3d(torch.arange(1., 126.).reshape(1, 1, 5, 5, 5), 2, 2, 0, True) is 3x3x3.
  const Tensor v = arange(1, 126, 1, kFloat64).reshape({1, 1, 5, 5, 5});
  const Tensor ceil3 = F::avg_pool3d(v, 2, 2, 0, true);
  CHECK(ceil3.shape() == Shape{1, 1, 3, 3, 3});
  CHECK(avg_pool3d(v, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, true).shape() == Shape{1, 1, 3, 3, 3});
  check_values(ceil3.flatten().narrow(0, 0, 3), {16.5, 18.5, 20.0});
  check_values(ceil3.flatten().narrow(0, 26, 1), {125.0});
  check_values(F::avg_pool3d(v, 2, 2, 1, false, true).flatten().narrow(0, 0, 3), {0.125, 0.625, 1.125});
  check_values(F::avg_pool3d(v, 2, 2, 1, false, false).flatten().narrow(0, 0, 3), {1.0, 2.5, 4.5});
}

TEST_CASE("return_indices gives flat positions in the input plane, without gradient") {
  // 1 x 1 x 2 x 2 x 4: the maximum of each 2x2x2 block sits at a known place.
  std::vector<double> v(16, 0.0);
  v[1 * 8 + 1 * 4 + 0] = 5;  // block 0: (d=1, h=1, w=0)
  v[0 * 8 + 0 * 4 + 3] = 7;  // block 1: (d=0, h=0, w=3)
  Tensor x = tensor(v, {1, 1, 2, 2, 4}, kFloat64).requires_grad_();
  auto [y, idx] = max_pool3d_with_indices(x, {2, 2, 2});
  CHECK(idx.dtype() == kInt64);
  CHECK(!idx.requires_grad());
  CHECK(idx.to_vector<int64_t>() == std::vector<int64_t>{12, 3});
  check_values(y, {5, 7});
  y.backward(tensor({1.0, 2.0}, {1, 1, 1, 1, 2}, kFloat64));
  std::vector<double> want(16, 0.0);
  want[12] = 1, want[3] = 2;
  check_values(x.grad(), want);

  // 2-D: flat h*W+w in each plane; adaptive pools too.
  const Tensor z = tensor({0, 1, 0, 0, 9, 0, 0, 0, 3}, {1, 3, 3}, kFloat64);
  CHECK(std::get<1>(max_pool2d_with_indices(z, {2, 2}, {1, 1})).to_vector<int64_t>() ==
        std::vector<int64_t>{4, 4, 4, 4});
  CHECK(std::get<1>(adaptive_max_pool2d_with_indices(z, {1, 1})).to_vector<int64_t>() == std::vector<int64_t>{4});
  CHECK(std::get<1>(adaptive_max_pool3d_with_indices(x.detach(), {1, 1, 1})).to_vector<int64_t>() ==
        std::vector<int64_t>{3});
}

TEST_CASE("adaptive 3-D pools use PyTorch's floor/ceil bins in every dimension") {
  const Tensor x = random_input({2, 2, 5, 7, 3}, 3);
  const std::vector<double> xv = x.to_vector<double>();
  const Size3 sizes[] = {{1, 1, 1}, {2, 3, 2}, {5, 7, 3}, {7, 4, 5}};
  for (const Size3& os : sizes) {
    const std::string output_size = std::to_string(os[0]) + "x" + std::to_string(os[1]) + "x" + std::to_string(os[2]);
    CAPTURE(output_size);
    std::vector<double> want_avg, want_max;
    for (int64_t pl = 0; pl < 4; ++pl)
      for (int64_t a = 0; a < os[0]; ++a)
        for (int64_t b = 0; b < os[1]; ++b)
          for (int64_t c = 0; c < os[2]; ++c) {
            const int64_t in[3] = {5, 7, 3}, o[3] = {a, b, c}, n[3] = {os[0], os[1], os[2]};
            int64_t lo[3], hi[3];
            for (int i = 0; i < 3; ++i) {
              lo[i] = static_cast<int64_t>(std::floor(static_cast<double>(o[i] * in[i]) / static_cast<double>(n[i])));
              hi[i] = static_cast<int64_t>(std::ceil(static_cast<double>((o[i] + 1) * in[i]) / static_cast<double>(n[i])));
            }
            double sum = 0, best = -INFINITY;
            int64_t count = 0;
            for (int64_t d = lo[0]; d < hi[0]; ++d)
              for (int64_t h = lo[1]; h < hi[1]; ++h)
                for (int64_t w = lo[2]; w < hi[2]; ++w) {
                  const double v = xv[static_cast<size_t>(((pl * 5 + d) * 7 + h) * 3 + w)];
                  sum += v;
                  best = std::max(best, v);
                  ++count;
                }
            want_avg.push_back(sum / static_cast<double>(count));
            want_max.push_back(best);
          }
    check_values(adaptive_avg_pool3d(x, os), want_avg);
    check_values(adaptive_max_pool3d(x, os), want_max);
  }
  CHECK(adaptive_avg_pool3d(x, {0, 2, 2}).shape() == Shape{2, 2, 0, 2, 2});
  CHECK(adaptive_avg_pool3d(x.select(0, 0), {2, 2, 2}).shape() == Shape{2, 2, 2, 2});  // unbatched
}

TEST_CASE("3-D pooling and the 2-D options: gradients match finite differences") {
  for (const std::string mode : {"max", "avg"})
    for (const Pool& c : kPools3d) {
      if (mode == "avg" && dilated(c)) continue;
      CAPTURE(mode);
      const std::string pool = describe(c);
      CAPTURE(pool);
      check_gradients([&](const std::vector<Tensor>& in) { return pool3d(in[0], c, mode); },
                      {random_input({1, 2, 5, 6, 5}, 4)});
    }
  for (const std::string mode : {"max", "avg"})
    for (const Pool& c : kPools2d) {
      if ((mode == "avg" && dilated(c)) || (mode == "max" && c.divisor)) continue;
      CAPTURE(mode);
      const std::string pool = describe(c);
      CAPTURE(pool);
      check_gradients([&](const std::vector<Tensor>& in) { return pool2d(in[0], c, mode); },
                      {random_input({2, 2, 7, 6}, 5)});
    }
  const Size3 sizes[] = {{1, 1, 1}, {2, 3, 2}, {4, 5, 7}};
  for (const Size3& os : sizes) {
    check_gradients([&](const std::vector<Tensor>& in) { return adaptive_avg_pool3d(in[0], os); },
                    {random_input({1, 2, 3, 4, 5}, 6)});
    check_gradients([&](const std::vector<Tensor>& in) { return adaptive_max_pool3d(in[0], os); },
                    {random_input({1, 2, 3, 4, 5}, 7)});
  }
  check_gradients([](const std::vector<Tensor>& in) { return max_pool3d(in[0], {2, 2, 2}, {1, 1, 1}); },
                  {random_input({2, 4, 3, 5}, 8)});  // unbatched
}

TEST_CASE("float32 3-D pooling agrees with float64, also on the parallel path") {
  const Tensor x64 = random_input({2, 8, 8, 16, 16}, 9);
  const Tensor x32 = x64.to(kFloat32);
  const std::vector<double> xv = x64.to_vector<double>();
  for (const std::string mode : {"max", "avg"}) {
    CAPTURE(mode);
    const Pool c = kPools3d[1];
    const std::vector<double> want = ref_pool(xv, 16, {8, 16, 16}, c, mode);
    check_values(pool3d(x64, c, mode), want);
    check_values(pool3d(x32, c, mode), want, 1e-6);
  }
  // Parallel backward: 2x2x2 / 2 windows touch every input once.
  Tensor x = x64.detach().requires_grad_();
  Tensor y = avg_pool3d(x, {2, 2, 2});
  y.backward(ones_like(y));
  for (double g : x.grad().to_vector<double>()) CHECK(g == 0.125);
}

TEST_CASE("pooling takes non-contiguous 3-D input; an empty batch gives an empty output") {
  const Tensor x = random_input({2, 3, 5, 6, 4}, 10);
  const Tensor xt = x.transpose(2, 4);
  REQUIRE(!xt.is_contiguous());
  CHECK(allclose(max_pool3d(xt, {2, 2, 2}, {1, 1, 1}), max_pool3d(xt.contiguous(), {2, 2, 2}, {1, 1, 1}), 0, 0));
  CHECK(allclose(avg_pool3d(xt, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}),
                 avg_pool3d(xt.contiguous(), {3, 3, 3}, {2, 2, 2}, {1, 1, 1}), 0, 0));
  Tensor e = zeros({0, 3, 4, 4, 4}, kFloat64).requires_grad_();
  CHECK(max_pool3d(e, {2, 2, 2}).shape() == Shape{0, 3, 2, 2, 2});
  CHECK(avg_pool3d(e, {2, 2, 2}).shape() == Shape{0, 3, 2, 2, 2});
  CHECK(adaptive_max_pool3d(e, {3, 1, 2}).shape() == Shape{0, 3, 3, 1, 2});
}

TEST_CASE("pooling argument errors use PyTorch's wording") {
  const Tensor x4 = zeros({2, 3, 5, 5}), x5 = zeros({2, 3, 4, 5, 5});
  // 2-D options
  CHECK_THROWS_CONTAINS(max_pool2d(x4, {3, 3}, {1, 1}, {2, 2}, {2, 2}),
                        "pad should be smaller than or equal to half of kernel size, but got padW = 2, padH = 2, "
                        "kW = 3, kH = 3");
  CHECK_THROWS_CONTAINS(max_pool2d(x4, {3, 3}, {1, 1}, {0, 0}, {1, 0}),
                        "dilation should be greater than zero, but got dilationH: 1 dilationW: 0");
  CHECK_THROWS_CONTAINS(max_pool2d(x4, {3, 3}, {1, 1}, {0, 0}, {3, 3}),
                        "Given input size: (3x5x5). Calculated output size: (3x-1x-1). Output size is too small");
  CHECK_THROWS_CONTAINS(avg_pool2d(x4, {3, 3}, {1, 1}, {1, 1}, false, true, 0), "divisor must be not zero");
  CHECK(avg_pool2d(x4, {3, 3}, {1, 1}, {1, 1}, false, true, -2).shape() == Shape{2, 3, 5, 5});  // as PyTorch
  // 3-D
  CHECK_THROWS_CONTAINS(max_pool3d(x5, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}),
                        "pad should be at most half of effective kernel size, but got pad=2, kernel_size=3 and "
                        "dilation=1");
  CHECK_THROWS_CONTAINS(max_pool3d(x5, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}, {2, 2, 2}),
                        "pad should be smaller than or equal to half of kernel size, but got kT: 3 kW: 3 kH: 3 "
                        "padT: 2 padW: 2 padH: 2");
  CHECK_THROWS_CONTAINS(max_pool3d(x5, {0, 2, 2}), "kernel size should be greater than zero, but got kT: 0 kH: 2 kW: 2");
  CHECK_THROWS_CONTAINS(avg_pool3d(x5, {2, 2, 2}, {1, -1, 1}),
                        "stride should be greater than zero, but got dT: 1 dH: -1 dW: 1");
  CHECK_THROWS_CONTAINS(max_pool3d(x5, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {1, 0, 1}),
                        "dilation should be greater than zero, but got dilationT: 1 dilationH: 0 dilationW: 1");
  CHECK_THROWS_CONTAINS(max_pool3d(x5, {2, 2, 2}, {1, 1, 1}, {-1, 0, 0}), "pad must be non-negative, but got pad: -1");
  CHECK_THROWS_CONTAINS(max_pool3d(zeros({3, 4, 5}), {2, 2, 2}),
                        "max_pool3d: non-empty 4D or 5D (batch mode) tensor expected for input, but got: [3, 4, 5]");
  CHECK_THROWS_CONTAINS(avg_pool3d(zeros({1, 0, 4, 4, 4}), {2, 2, 2}),
                        "Expected input to have non-zero size for non-batch dimensions, but input has sizes "
                        "[1, 0, 4, 4, 4] with dimension 1 being empty");
  CHECK_THROWS_CONTAINS(max_pool3d(zeros({1, 3, 1, 4, 4}), {2, 2, 2}),
                        "Given input size: (3x1x4x4). Calculated output size: (3x0x2x2). Output size is too small");
  CHECK_THROWS_CONTAINS(avg_pool3d(zeros({1, 3, 1, 4, 4}), {2, 2, 2}),
                        "input image (T: 1 H: 4 W: 4) smaller than kernel size (kT: 2 kH: 2 kW: 2)");
  CHECK_THROWS_CONTAINS(avg_pool3d(x5, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}, false, true, 0), "divisor must be not zero");
  CHECK_THROWS_CONTAINS(max_pool3d(zeros({1, 1, 4, 4, 4}, kInt64), {2, 2, 2}), "max_pool3d: expected a floating point");
  CHECK_THROWS_CONTAINS(adaptive_avg_pool3d(zeros({3, 4}), {2, 2, 2}),
                        "adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got: [3, 4]");
  CHECK_THROWS_CONTAINS(adaptive_max_pool3d(zeros({1, 2, 0, 4, 4}), {1, 1, 1}),
                        "adaptive_max_pool3d(): Expected input to have non-zero size for non-batch dimensions, but "
                        "input has sizes [1, 2, 0, 4, 4] with dimension 2 being empty");
  CHECK_THROWS_CONTAINS(adaptive_avg_pool3d(x5, {-1, 2, 2}),
                        "elements of output_size must be greater than or equal to 0 but received {-1, 2, 2}");
}

TEST_CASE("nn pooling layers: PyTorch's defaults, options and repr") {
  const Tensor x = random_input({2, 3, 6, 7, 5}, 11);
  CHECK(allclose(nn::MaxPool3d(2)(x), max_pool3d(x, {2, 2, 2}), 0, 0));
  CHECK(allclose(nn::AvgPool3d(nn::AvgPool3dOptions(3).stride(2).padding(1).count_include_pad(false).ceil_mode(true))(x),
                 avg_pool3d(x, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, true, false), 0, 0));
  CHECK(allclose(nn::AdaptiveAvgPool3d(1)(x), x.mean({2, 3, 4}, true), 1e-12, 1e-12));
  CHECK(nn::AdaptiveMaxPool3d(nn::AdaptiveMaxPool3dOptions({1, 2, 3}))(x).shape() == Shape{2, 3, 1, 2, 3});
  const Tensor x2 = x.select(2, 0);
  CHECK(allclose(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1).dilation(2).ceil_mode(true))(x2),
                 max_pool2d(x2, {3, 3}, {2, 2}, {1, 1}, {2, 2}, true), 0, 0));
  CHECK(allclose(nn::AvgPool2d(nn::AvgPool2dOptions(3).padding(1).divisor_override(2))(x2),
                 avg_pool2d(x2, {3, 3}, {3, 3}, {1, 1}, false, true, 2), 0, 0));
  CHECK(allclose(nn::AdaptiveMaxPool2d(2)(x2), adaptive_max_pool2d(x2, {2, 2}), 0, 0));
  auto [y, idx] = nn::MaxPool3d(2)->forward_with_indices(x);
  CHECK(allclose(y, max_pool3d(x, {2, 2, 2}), 0, 0));
  CHECK(idx.dtype() == kInt64);

  auto repr = [](const nn::Module& m) { return m.name() + "(" + m.extra_repr() + ")"; };
  // As PyTorch prints them.
  CHECK(repr(*nn::MaxPool3d(2)) == "MaxPool3d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  CHECK(repr(*nn::MaxPool3d(nn::MaxPool3dOptions({2, 3, 3}).stride(nn::Int3(1, 2, 2)))) ==
        "MaxPool3d(kernel_size=(2, 3, 3), stride=(1, 2, 2), padding=0, dilation=1, ceil_mode=False)");
  CHECK(repr(*nn::AvgPool3d(nn::AvgPool3dOptions(3).divisor_override(2))) ==
        "AvgPool3d(kernel_size=3, stride=3, padding=0)");
  CHECK(repr(*nn::AdaptiveAvgPool3d(1)) == "AdaptiveAvgPool3d(output_size=1)");
  CHECK(repr(*nn::AdaptiveMaxPool3d(nn::AdaptiveMaxPool3dOptions({1, 2, 3}))) ==
        "AdaptiveMaxPool3d(output_size=(1, 2, 3))");
  CHECK(repr(*nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1).dilation(2).ceil_mode(true))) ==
        "MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)");
  CHECK(repr(*nn::AdaptiveMaxPool2d(2)) == "AdaptiveMaxPool2d(output_size=2)");

  CHECK_THROWS_CONTAINS(nn::MaxPool3d(nn::MaxPool3dOptions(2).dilation({1, 0, 1})), "MaxPool3d: dilation must be greater");
  CHECK_THROWS_CONTAINS(nn::AvgPool3d(nn::AvgPool3dOptions(2).divisor_override(0)), "divisor must be not zero");
  CHECK_THROWS_CONTAINS(nn::AvgPool3d(nn::AvgPool3dOptions(2).padding(2)), "pad should be at most half");
  CHECK_THROWS_CONTAINS(nn::AdaptiveAvgPool3d(nn::AdaptiveAvgPool3dOptions({1, -1, 1})), "must be non-negative");
}
