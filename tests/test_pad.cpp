// pad (F.pad): every mode against hand-written expectations, negative
// (cropping) constant pads, float64 gradient checks (reflect, replicate and
// circular read some inputs more than once, so their grads sum), and the
// error paths with PyTorch's wording.
#include "minidl/ops/pad.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;

namespace {

Tensor row(std::vector<double> v) {
  const auto n = static_cast<int64_t>(v.size());
  return tensor(v, {1, 1, n}, kFloat64);
}

}  // namespace

TEST_CASE("pad: each mode on one row") {
  const Tensor x = row({1, 2, 3, 4});
  CHECK(allclose(pad(x, {2, 1}), row({0, 0, 1, 2, 3, 4, 0}), 0, 0));
  CHECK(allclose(pad(x, {2, 1}, "constant", 7.5), row({7.5, 7.5, 1, 2, 3, 4, 7.5}), 0, 0));
  CHECK(allclose(pad(x, {3, 2}, "reflect"), row({4, 3, 2, 1, 2, 3, 4, 3, 2}), 0, 0));
  CHECK(allclose(pad(x, {2, 3}, "replicate"), row({1, 1, 1, 2, 3, 4, 4, 4, 4}), 0, 0));
  CHECK(allclose(pad(x, {4, 2}, "circular"), row({1, 2, 3, 4, 1, 2, 3, 4, 1, 2}), 0, 0));
  CHECK(allclose(pad(x, {-1, -2}), row({2}), 0, 0));  // negative constant pads crop
  CHECK(allclose(pad(x, {-1, 2}, "reflect"), row({2, 3, 4, 3, 2}), 0, 0));
  CHECK(pad(x, {-2, -2}).shape() == Shape{1, 1, 0});
}

TEST_CASE("pad: several dimensions, last dimension first") {
  const Tensor x = tensor({1, 2, 3, 4, 5, 6}, {1, 2, 3}, kFloat64);  // rows (1 2 3), (4 5 6)
  const Tensor want = tensor({5, 4, 5, 6, 5,  //
                              2, 1, 2, 3, 2,  //
                              5, 4, 5, 6, 5,  //
                              2, 1, 2, 3, 2},
                             {1, 4, 5}, kFloat64);
  CHECK(allclose(pad(x, {1, 1, 1, 1}, "reflect"), want, 0, 0));
  // Constant padding of a leading dimension (any number of dimensions for "constant").
  const Tensor y = pad(x, {0, 0, 0, 0, 1, 0}, "constant", 2.0);
  CHECK(y.shape() == Shape{2, 2, 3});
  CHECK(allclose(y.select(0, 0), full({2, 3}, 2.0, kFloat64), 0, 0));
  CHECK(allclose(y.select(0, 1), x.select(0, 0), 0, 0));
  // 3-D reflect on a 5-D tensor and replicate on an unbatched 4-D one.
  CHECK(pad(randn({2, 3, 4, 5, 6}), {1, 2, 3, 0, 1, 1}, "reflect").shape() == Shape{2, 3, 6, 8, 9});
  CHECK(pad(randn({3, 4, 5, 6}), {1, 2, 3, 0, 1, 1}, "replicate").shape() == Shape{3, 6, 8, 9});
}

TEST_CASE("pad float64 gradient checks, every mode") {
  manual_seed(4);
  for (const char* mode : {"constant", "reflect", "replicate", "circular"}) {
    CAPTURE(mode);
    check_gradients([mode](const std::vector<Tensor>& t) { return pad(t[0], {2, 1, 1, 3}, mode, 0.5); },
                    {randn({2, 2, 4, 3}, kFloat64).requires_grad_()});
    check_gradients([mode](const std::vector<Tensor>& t) { return pad(t[0], {1, 0, 2, 2, 1, 1}, mode); },
                    {randn({1, 2, 2, 3, 3}, kFloat64).requires_grad_()});
  }
  check_gradients([](const std::vector<Tensor>& t) { return pad(t[0], {-1, 2, 0, -1}); },
                  {randn({2, 3, 4}, kFloat64).requires_grad_()});
}

TEST_CASE("pad errors use PyTorch's wording") {
  const Tensor x = randn({1, 2, 4, 4});
  CHECK_THROWS_CONTAINS(pad(x, {1, 2, 3}), "Padding length must be divisible by 2");
  CHECK_THROWS_CONTAINS(pad(x, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}),
                        "Padding length should be less than or equal to two times the input dimension but got "
                        "padding length 10 and input of dimension 4");
  CHECK_THROWS_CONTAINS(pad(x, {-3, -2}), "The input size 4, plus negative padding -3 and -2 resulted in a negative "
                                          "output size, which is invalid. Check dimension 3 of your input.");
  const Tensor x3 = randn({1, 2, 4});
  // {4, 4, 0, 0}: GCC 12.2 with AVX-512 built this constant as {4, 4, 4, 4}
  // (cmake/gcc_slp_constant_check.cpp; the build now works around it).
  CHECK_THROWS_CONTAINS(pad(x, {4, 4, 0, 0}, "reflect"),
                        "Argument #4: Padding size should be less than the corresponding input dimension, but got: "
                        "padding (4, 4) at dimension 3 of input [1, 2, 4, 4]");
  CHECK_THROWS_CONTAINS(pad(x3, {1, 4}, "reflect"),
                        "Argument #4: Padding size should be less than the corresponding input dimension, but got: "
                        "padding (1, 4) at dimension 2 of input [1, 2, 4]");
  CHECK_THROWS_CONTAINS(pad(x, {0, 1, 4, 2}, "reflect"), "Argument #6: Padding size should be less than the corresponding input dimension, but got: padding (4, 2) at dimension 2 of input [1, 2, 4, 4]");
  CHECK_THROWS_CONTAINS(pad(x3, {5, 0}, "circular"), "Padding value causes wrapping around more than once.");
  CHECK_THROWS_CONTAINS(pad(x, {1, 1}, "reflect"), "Padding size 2 is not supported for 4D input tensor.");
  CHECK_THROWS_CONTAINS(pad(randn({4}), {1, 1}, "replicate"), "Padding size 2 is not supported for 1D input tensor.");
  CHECK_THROWS_CONTAINS(pad(x, {1, 1}, "wrap"), "Unrecognised padding mode wrap");
  CHECK_THROWS_CONTAINS(pad(randint(0, 3, {2, 2}), {1, 1}), "pad: expected a float32 or float64 input, got int64");
}
