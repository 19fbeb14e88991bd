// conv3d: forward and all grads against direct loops (tests/conv_reference.h)
// over many geometries (stride, padding, dilation, groups, depthwise, bias,
// unbatched, depth chunks with a remainder, shapes that send conv2d down its
// shifted, im2col and Winograd paths), float64 gradient checks, 1 vs 3
// threads, padding="same"/"valid", and the error paths with PyTorch's wording.
#include <omp.h>

#include "minidl/ops/conv3d.h"
#include "minidl/ops/conv_padding.h"
#include "minidl/ops/cpu/conv3d_kernels.h"
#include "tests/conv_reference.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;
using minidl::testing::conv_reference;
using minidl::testing::ConvProblem;
using minidl::testing::random_values;

namespace {

struct Case {
  ConvProblem p;
  bool bias = true, unbatched = false;
};

ConvProblem problem(int64_t N, int64_t C, int64_t K, std::array<int64_t, 3> in, std::array<int64_t, 3> k,
                    std::array<int64_t, 3> s = {1, 1, 1}, std::array<int64_t, 3> pad = {0, 0, 0},
                    std::array<int64_t, 3> d = {1, 1, 1}, int64_t groups = 1) {
  ConvProblem p;
  p.batch = N, p.in_channels = C, p.out_channels = K, p.groups = groups;
  p.in = in, p.kernel = k, p.stride = s, p.padding = pad, p.dilation = d;
  return p;
}

Conv3dParams params_of(const ConvProblem& p) {
  return Conv3dParams{.stride = p.stride, .padding = p.padding, .dilation = p.dilation, .groups = p.groups};
}

Shape sp(const ConvProblem& p, int64_t channels, bool out, bool unbatched) {
  Shape s;
  if (!unbatched) s.push_back(p.batch);
  s.push_back(channels);
  for (size_t i = 0; i < 3; ++i) s.push_back(out ? p.out(i) : p.in[i]);
  return s;
}

void check_case(const Case& c, DType dtype, uint64_t seed) {
  const ConvProblem& p = c.p;
  CAPTURE(seed);
  CAPTURE(dtype_name(dtype));
  const auto xv = random_values(static_cast<size_t>(p.x_size()), seed);
  const auto wv = random_values(static_cast<size_t>(p.w_size()), seed + 1);
  const auto bv = c.bias ? random_values(static_cast<size_t>(p.out_channels), seed + 2) : std::vector<double>();
  const auto dyv = random_values(static_cast<size_t>(p.y_size()), seed + 3);
  const auto ref = conv_reference(p, xv, wv, bv, dyv);
  Tensor x = tensor(xv, sp(p, p.in_channels, false, c.unbatched), dtype).requires_grad_();
  Tensor w = tensor(wv, {p.out_channels, p.in_channels / p.groups, p.kernel[0], p.kernel[1], p.kernel[2]}, dtype)
                 .requires_grad_();
  Tensor b = c.bias ? tensor(bv, {p.out_channels}, dtype).requires_grad_() : Tensor();
  Tensor y = conv3d(x, w, b, params_of(p));
  const Shape ys = sp(p, p.out_channels, true, c.unbatched);
  REQUIRE(y.shape() == ys);
  const double tol = dtype == kFloat32 ? 1e-4 : 1e-10;
  CHECK(allclose(y, tensor(ref.y, ys, kFloat64), tol, tol));
  y.backward(tensor(dyv, ys, dtype));
  CHECK(allclose(x.grad(), tensor(ref.dx, x.shape(), kFloat64), tol, tol));
  CHECK(allclose(w.grad(), tensor(ref.dw, w.shape(), kFloat64), tol, tol));
  if (c.bias) CHECK(allclose(b.grad(), tensor(ref.db, b.shape(), kFloat64), tol, tol));
}

std::vector<Case> cases() {
  return {
      {problem(2, 3, 4, {5, 6, 7}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1})},
      {problem(2, 3, 4, {5, 6, 7}, {3, 3, 3}), false},
      {problem(1, 2, 3, {7, 5, 6}, {3, 2, 3}, {2, 1, 2}, {1, 0, 1})},                 // strides
      {problem(2, 2, 2, {7, 7, 6}, {3, 3, 2}, {1, 2, 1}, {2, 1, 0}, {2, 2, 1})},      // dilation
      {problem(2, 4, 6, {4, 5, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 2)},   // groups
      {problem(2, 4, 8, {4, 5, 5}, {3, 1, 3}, {1, 1, 1}, {1, 0, 1}, {1, 1, 1}, 4)},   // depthwise, multiplier 2
      {problem(1, 3, 5, {4, 4, 4}, {1, 1, 1})},                                       // 1x1x1
      {problem(1, 2, 3, {6, 4, 4}, {2, 2, 2}, {2, 2, 2})},                            // UNet downsampling
      {problem(1, 2, 3, {3, 4, 5}, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}), true, true},     // unbatched, padding > kernel/2
      {problem(1, 2, 2, {5, 3, 3}, {5, 1, 1}, {3, 1, 1}, {4, 0, 0}, {1, 1, 1})},      // depth taps mostly padding
      {problem(2, 2, 3, {7, 3, 3}, {2, 3, 3}, {3, 1, 1}, {0, 1, 1})},                 // depths no tap reaches (sd > kD)
  };
}

}  // namespace

TEST_CASE("conv3d forward and grads match direct loops (float32 and float64)") {
  uint64_t seed = 1;
  for (const Case& c : cases())
    for (DType dt : {kFloat64, kFloat32}) check_case(c, dt, seed += 10);
}

TEST_CASE("conv3d: conv2d paths underneath (im2col on small maps, Winograd, shifted planes) and chunk remainders") {
  // 64 channels * 3 depth taps on 4x4: im2col; 3x3x3 with 64 -> 64: Winograd
  // on the stacked slices; 20x20: shifted planes. Depth 37 with big slices: the
  // chunk (conv3d_depth_chunk) does not divide the output depth.
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(2);  // the chunk depends on the thread count
  const Case big_slices{problem(1, 8, 4, {37, 40, 40}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1})};
  Conv3dGeometry g;
  g.hw.batch = 1, g.hw.in_channels = 8, g.hw.in_h = 40, g.hw.in_w = 40, g.hw.out_channels = 4;
  g.hw.kernel_h = g.hw.kernel_w = 3, g.hw.pad_h = g.hw.pad_w = 1, g.in_d = 37, g.kernel_d = 3, g.pad_d = 1;
  conv3d_set_output_size(g);
  const int64_t chunk = conv3d_depth_chunk(g, sizeof(double));
  CHECK(chunk < g.out_d);
  CHECK(g.out_d % chunk != 0);
  const std::vector<Case> more = {
      {problem(2, 64, 16, {3, 4, 4}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1})},
      {problem(1, 64, 64, {3, 6, 6}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1})},
      {problem(1, 4, 8, {3, 20, 20}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1})},
      big_slices,
  };
  uint64_t seed = 500;
  for (const Case& c : more) check_case(c, kFloat64, seed += 10);
  omp_set_num_threads(saved_threads);
}

TEST_CASE("conv3d gives the same result on 1 and 3 threads") {
  const int saved = omp_get_max_threads();
  const Case c{problem(2, 8, 8, {6, 12, 12}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1})};
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    manual_seed(3);
    Tensor x = randn({2, 8, 6, 12, 12}).requires_grad_(), w = randn({8, 8, 3, 3, 3}).requires_grad_();
    Tensor y = conv3d(x, w, Tensor(), params_of(c.p));
    y.backward(ones_like(y));
    return std::vector<Tensor>{y.detach(), x.grad(), w.grad()};
  };
  const auto one = run(1), three = run(3);
  omp_set_num_threads(saved);
  // w's grad sums 2 * 6 * 144 products per entry, in an order that depends on
  // how the slices are split over the threads (and on the conv2d GEMM's K
  // blocks): float rounding of about 1e-5 of its entries (~20).
  for (size_t i = 0; i < one.size(); ++i) {
    const double tol = i == 2 ? 1e-4 : 1e-5;
    CHECK(allclose(one[i], three[i], tol, tol));
  }
}

TEST_CASE("conv3d float64 gradient checks") {
  manual_seed(11);
  auto f = [](Conv3dParams p) {
    return [p](const std::vector<Tensor>& t) { return conv3d(t[0], t[1], t[2], p); };
  };
  check_gradients(f({.stride = {1, 2, 1}, .padding = {1, 0, 1}}),
                  {randn({2, 2, 3, 4, 3}, kFloat64).requires_grad_(), randn({3, 2, 2, 3, 2}, kFloat64).requires_grad_(),
                   randn({3}, kFloat64).requires_grad_()});
  check_gradients(f({.padding = {1, 1, 0}, .dilation = {2, 1, 1}, .groups = 2}),
                  {randn({1, 4, 4, 3, 3}, kFloat64).requires_grad_(), randn({2, 2, 2, 2, 2}, kFloat64).requires_grad_(),
                   randn({2}, kFloat64).requires_grad_()});
}

TEST_CASE("conv3d only computes the grads that are needed; empty batch") {
  Tensor x = randn({1, 2, 3, 3, 3}).requires_grad_(), w = randn({2, 2, 2, 2, 2});
  conv3d(x, w).sum().backward();
  CHECK(x.grad().defined());
  CHECK(!w.grad().defined());
  Tensor e = zeros({0, 2, 3, 3, 3}), we = randn({3, 2, 2, 2, 2}).requires_grad_();
  Tensor y = conv3d(e, we);
  CHECK(y.shape() == Shape{0, 3, 2, 2, 2});
  y.sum().backward();
  CHECK(allclose(we.grad(), zeros_like(we), 0, 0));
}

TEST_CASE("conv3d padding='same' and 'valid' (PyTorch's asymmetric split for even kernels)") {
  CHECK(conv_same_pads({3, 4, 1}, {1, 2, 1}) == std::vector<int64_t>{0, 0, 3, 3, 1, 1});
  CHECK(conv_same_pads({4, 2}, {1, 1}) == std::vector<int64_t>{0, 1, 1, 2});
  manual_seed(5);
  Tensor x = randn({1, 2, 5, 6, 7}, kFloat64), w = randn({3, 2, 2, 3, 4}, kFloat64), b = randn({3}, kFloat64);
  Tensor y = conv3d(x, w, b, "same");
  CHECK(y.shape() == Shape{1, 3, 5, 6, 7});
  // Even kernels: the extra pad goes on the right, so this equals padding
  // (0, 1) / (1, 1) / (1, 2) explicitly (pad() is checked in tests/test_pad.cpp).
  Tensor explicit_pad = conv3d(pad(x, {1, 2, 1, 1, 0, 1}), w, b);
  CHECK(allclose(y, explicit_pad, 1e-12, 1e-12));
  CHECK(conv3d(x, w, b, "valid").shape() == Shape{1, 3, 4, 4, 4});
  check_gradients([](const std::vector<Tensor>& t) { return conv3d(t[0], t[1], Tensor(), "same", {1, 1, 1}, {1, 2, 1}); },
                  {randn({1, 1, 3, 4, 3}, kFloat64).requires_grad_(), randn({1, 1, 2, 2, 3}, kFloat64).requires_grad_()});
  CHECK_THROWS_CONTAINS(conv3d(x, w, b, "same", {1, 2, 1}), "padding='same' is not supported for strided convolutions");
  CHECK_THROWS_CONTAINS(conv3d(x, w, b, "full"), "Invalid padding string 'full', should be one of {'valid', 'same'}");
  Tensor x2 = randn({1, 2, 6, 7}, kFloat64), w2 = randn({3, 2, 4, 3}, kFloat64);
  CHECK(allclose(conv2d(x2, w2, Tensor(), "same", {1, 1}, {1, 2}),
                 conv2d(pad(x2, {2, 2, 1, 2}), w2, Tensor(), Conv2dParams{.dilation = {1, 2}}), 1e-12, 1e-12));
}

TEST_CASE("conv3d errors use PyTorch's wording") {
  Tensor x = randn({1, 4, 4, 4, 4});
  CHECK_THROWS_CONTAINS(conv3d(randn({4, 4, 4}), randn({4, 4, 3, 3, 3})),
                        "Expected 4D (unbatched) or 5D (batched) input to conv3d, but got input of size: [4, 4, 4]");
  CHECK_THROWS_CONTAINS(conv3d(x, randn({4, 2, 3, 3, 3})),
                        "Given groups=1, weight of size [4, 2, 3, 3, 3], expected input[1, 4, 4, 4, 4] to have 2 "
                        "channels, but got 4 channels instead");
  CHECK_THROWS_CONTAINS(conv3d(randn({4, 4, 4, 4}), randn({4, 2, 3, 3, 3})), "expected input[1, 4, 4, 4, 4]");
  CHECK_THROWS_CONTAINS(conv3d(x, randn({3, 2, 3, 3, 3}), Tensor(), {.groups = 2}),
                        "Given groups=2, expected weight to be divisible by 2 at dimension 0, but got weight of size "
                        "[3, 2, 3, 3, 3] instead");
  CHECK_THROWS_CONTAINS(conv3d(x, randn({4, 4, 5, 3, 3})),
                        "Calculated padded input size per channel: (4 x 4 x 4). Kernel size: (5 x 3 x 3). Kernel size "
                        "can't be greater than actual input size");
  CHECK_THROWS_CONTAINS(conv3d(x, randn({4, 4, 3, 3, 3}), randn({3})),
                        "expected bias to be 1-dimensional with 4 elements, but got bias of size [3] instead");
  CHECK_THROWS_CONTAINS(conv3d(x, randn({4, 4, 3, 3})), "conv3d: expected weight of size");
  CHECK_THROWS_CONTAINS(conv3d(x, randn({4, 4, 3, 3, 3}, kFloat64)), "Input type (float32) and weight type (float64) should be the same");
  CHECK_THROWS_CONTAINS(conv3d(x, randn({4, 4, 3, 3, 3}), Tensor(), {.stride = {1, 0, 1}}), "non-positive stride is not supported");
  CHECK_THROWS_CONTAINS(conv3d(x, randn({4, 4, 3, 3, 3}), Tensor(), {.padding = {0, -1, 0}}), "negative padding is not supported");
}
