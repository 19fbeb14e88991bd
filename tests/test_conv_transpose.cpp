// conv_transpose2d / conv_transpose3d: forward and all grads against direct
// loops (tests/conv_reference.h) over stride, padding, output_padding
// (including output_padding >= stride, allowed when < dilation), dilation,
// groups, bias and unbatched inputs; float64 gradient checks; PyTorch's
// output-size formula and error messages.
#include "minidl/ops/conv_transpose.h"
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
  int dims;  // 2 or 3
  ConvProblem p;
  bool bias = true, unbatched = false;
};

ConvProblem problem(int64_t N, int64_t C, int64_t K, std::array<int64_t, 3> in, std::array<int64_t, 3> k,
                    std::array<int64_t, 3> s = {1, 1, 1}, std::array<int64_t, 3> pad = {0, 0, 0},
                    std::array<int64_t, 3> op = {0, 0, 0}, std::array<int64_t, 3> d = {1, 1, 1}, int64_t groups = 1) {
  ConvProblem p;
  p.transposed = true;
  p.batch = N, p.in_channels = C, p.out_channels = K, p.groups = groups;
  p.in = in, p.kernel = k, p.stride = s, p.padding = pad, p.output_padding = op, p.dilation = d;
  return p;
}

// The last `dims` entries of a.
template <size_t D>
std::array<int64_t, D> last(const std::array<int64_t, 3>& a) {
  std::array<int64_t, D> r{};
  for (size_t i = 0; i < D; ++i) r[i] = a[3 - D + i];
  return r;
}

Tensor run(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  const ConvProblem& p = c.p;
  if (c.dims == 2)
    return conv_transpose2d(x, w, b, {.stride = last<2>(p.stride), .padding = last<2>(p.padding),
                                      .output_padding = last<2>(p.output_padding), .groups = p.groups,
                                      .dilation = last<2>(p.dilation)});
  return conv_transpose3d(x, w, b, {.stride = p.stride, .padding = p.padding, .output_padding = p.output_padding,
                                    .groups = p.groups, .dilation = p.dilation});
}

Shape shape_of(const Case& c, int64_t channels, bool out) {
  Shape s;
  if (!c.unbatched) s.push_back(c.p.batch);
  s.push_back(channels);
  for (size_t i = 3 - static_cast<size_t>(c.dims); i < 3; ++i) s.push_back(out ? c.p.out(i) : c.p.in[i]);
  return s;
}

void check_case(const Case& c, DType dtype, uint64_t seed) {
  const ConvProblem& p = c.p;
  CAPTURE(seed);
  const auto xv = random_values(static_cast<size_t>(p.x_size()), seed);
  const auto wv = random_values(static_cast<size_t>(p.w_size()), seed + 1);
  const auto bv = c.bias ? random_values(static_cast<size_t>(p.out_channels), seed + 2) : std::vector<double>();
  const auto dyv = random_values(static_cast<size_t>(p.y_size()), seed + 3);
  const auto ref = conv_reference(p, xv, wv, bv, dyv);
  Tensor x = tensor(xv, shape_of(c, p.in_channels, false), dtype).requires_grad_();
  Shape ws{p.in_channels, p.out_channels / p.groups};
  for (size_t i = 3 - static_cast<size_t>(c.dims); i < 3; ++i) ws.push_back(p.kernel[i]);
  Tensor w = tensor(wv, ws, dtype).requires_grad_();
  Tensor b = c.bias ? tensor(bv, {p.out_channels}, dtype).requires_grad_() : Tensor();
  Tensor y = run(c, x, w, b);
  const Shape ys = shape_of(c, p.out_channels, true);
  REQUIRE(y.shape() == ys);
  const double tol = dtype == kFloat32 ? 1e-4 : 1e-10;
  CHECK(allclose(y, tensor(ref.y, ys, kFloat64), tol, tol));
  y.backward(tensor(dyv, ys, dtype));
  CHECK(allclose(x.grad(), tensor(ref.dx, x.shape(), kFloat64), tol, tol));
  CHECK(allclose(w.grad(), tensor(ref.dw, w.shape(), kFloat64), tol, tol));
  if (c.bias) CHECK(allclose(b.grad(), tensor(ref.db, b.shape(), kFloat64), tol, tol));
}

}  // namespace

TEST_CASE("conv_transpose2d and conv_transpose3d match direct loops (float32 and float64)") {
  const std::vector<Case> cases = {
      {2, problem(2, 3, 4, {1, 5, 6}, {1, 3, 3})},
      {2, problem(2, 4, 6, {1, 4, 5}, {1, 2, 2}, {1, 2, 2})},                                    // 2x upsampling
      {2, problem(1, 3, 2, {1, 5, 4}, {1, 3, 3}, {1, 2, 3}, {0, 1, 2}, {0, 1, 2})},              // output_padding
      {2, problem(2, 4, 6, {1, 4, 4}, {1, 3, 2}, {1, 2, 1}, {0, 1, 0}, {0, 1, 0}, {1, 1, 2}, 2)},  // groups, dilation
      {2, problem(1, 2, 2, {1, 4, 4}, {1, 3, 3}, {1, 1, 1}, {0, 0, 0}, {0, 1, 0}, {1, 2, 1})},   // op >= stride, < dilation
      {2, problem(1, 3, 4, {1, 3, 5}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}), false, true},           // unbatched, no bias
      {3, problem(2, 4, 3, {3, 4, 5}, {2, 2, 2}, {2, 2, 2})},                                    // UNet upsampling
      {3, problem(1, 2, 3, {3, 3, 4}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1})},
      {3, problem(2, 4, 4, {3, 4, 3}, {3, 2, 3}, {2, 1, 3}, {1, 0, 2}, {1, 0, 2}, {1, 2, 1}, 2)},
      {3, problem(1, 2, 3, {2, 3, 3}, {3, 3, 3}, {1, 1, 1}, {1, 0, 0}, {1, 0, 0}, {2, 1, 1})},   // op < dilation
      {3, problem(1, 3, 2, {2, 3, 2}, {2, 2, 2}, {2, 2, 2}), false, true},                       // unbatched
  };
  uint64_t seed = 1;
  for (const Case& c : cases)
    for (DType dt : {kFloat64, kFloat32}) check_case(c, dt, seed += 10);
}

TEST_CASE("conv_transpose float64 gradient checks") {
  manual_seed(3);
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return conv_transpose2d(t[0], t[1], t[2], {.stride = {2, 1}, .padding = {1, 0}, .output_padding = {1, 0}});
      },
      {randn({2, 2, 3, 3}, kFloat64).requires_grad_(), randn({2, 3, 3, 2}, kFloat64).requires_grad_(),
       randn({3}, kFloat64).requires_grad_()});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return conv_transpose3d(t[0], t[1], t[2], {.stride = {2, 2, 1}, .padding = {0, 1, 0}, .groups = 2});
      },
      {randn({1, 4, 2, 3, 2}, kFloat64).requires_grad_(), randn({4, 1, 2, 3, 2}, kFloat64).requires_grad_(),
       randn({2}, kFloat64).requires_grad_()});
}

TEST_CASE("conv_transpose errors use PyTorch's wording") {
  Tensor x = randn({1, 2, 4, 4});
  CHECK_THROWS_CONTAINS(conv_transpose2d(x, randn({2, 2, 3, 3}), Tensor(), {.stride = {2, 2}, .output_padding = {2, 2}}),
                        "output padding must be smaller than either stride or dilation, but got output_padding_height: "
                        "2 output_padding_width: 2 stride_height: 2 stride_width: 2 dilation_height: 1 dilation_width: 1");
  CHECK_THROWS_CONTAINS(conv_transpose3d(randn({1, 4, 4, 4, 4}), randn({4, 2, 3, 3, 3}), Tensor(),
                                         {.stride = {2, 2, 2}, .output_padding = {2, 2, 2}}),
                        "but got output_padding_depth: 2 output_padding_height: 2 output_padding_width: 2 "
                        "stride_depth: 2 stride_height: 2 stride_width: 2 dilation_depth: 1");
  CHECK_THROWS_CONTAINS(conv_transpose2d(x, randn({3, 2, 3, 3})),
                        "Given transposed=1, weight of size [3, 2, 3, 3], expected input[1, 2, 4, 4] to have 3 "
                        "channels, but got 2 channels instead");
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({2, 4, 4}), randn({3, 2, 3, 3})), "expected input[1, 2, 4, 4]");
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({2, 4}), randn({2, 2, 3, 3})),
                        "Expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, but got input of size: [2, 4]");
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({1, 4, 4, 4}), randn({4, 2, 3, 3}), randn({3})),
                        "Given transposed=1, weight of size [4, 2, 3, 3], expected bias to be 1-dimensional with 2 "
                        "elements, but got bias of size [3] instead");
  CHECK_THROWS_CONTAINS(conv_transpose2d(randn({1, 3, 4, 4}), randn({3, 2, 3, 3}), Tensor(), {.groups = 2}),
                        "Given groups=2, expected weight to be divisible by 2 at dimension 0");
  CHECK_THROWS_CONTAINS(conv_transpose2d(x, randn({2, 2, 3, 3}), Tensor(), {.padding = {3, 3}}),
                        "Given input size per channel: (4 x 4). Calculated output size per channel: (0 x 0). Output "
                        "size is too small");
  CHECK_THROWS_CONTAINS(conv_transpose2d(x, randn({2, 2, 3, 3}), Tensor(), {.padding = {-1, 0}}),
                        "negative padding is not supported");
  CHECK_THROWS_CONTAINS(conv_transpose2d(x, randn({2, 2, 3, 3}), Tensor(), {.output_padding = {-1, 0}}),
                        "negative output_padding is not supported");
  CHECK_THROWS_CONTAINS(conv_transpose2d(x, randn({2, 2, 3, 3}), Tensor(), {.stride = {0, 1}}),
                        "non-positive stride is not supported");
  CHECK(conv_transpose2d(x, randn({2, 5, 3, 3}), Tensor(), {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}})
            .shape() == Shape{1, 5, 8, 8});
}
