// Elementwise unary ops (neg, exp, log, sqrt, rsqrt, abs, pow, clamp, relu,
// leaky_relu, sigmoid, tanh, gelu): forward values against std:: references in
// float32 and float64, contiguous and strided, finite-difference gradients on
// odd shapes, PyTorch's gradients at and beyond the kinks, special values,
// integer inputs, errors and method forms. The binary ops:
// tests/test_elementwise.cpp.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>

#include "tests/elementwise_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;
using minidl::testing::randn64;
using minidl::testing::values_near;

namespace {

// Values of `t` moved at least `margin` away from every kink (keeps finite differences off them).
Tensor away_from(Tensor t, std::vector<double> kinks, double margin = 1e-2) {
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v)
    for (double k : kinks)
      if (std::abs(x - k) < margin) x = k + (x < k ? -margin : margin) * 2;
  return tensor(v, {t.numel()}, t.dtype()).reshape(t.shape());  // tensor() reads {} as 1-D
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  std::vector<double> kinks;  // gradcheck inputs stay away from these
  bool positive_domain = false;
};

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, {}},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, {}},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, {}, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, {}, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double v) { return 1 / std::sqrt(v); }, {}, true},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double v) { return std::abs(v); }, {0.0}},
      {"pow 2", [](const Tensor& x) { return pow(x, 2.0); }, [](double v) { return v * v; }, {}},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }, [](double v) { return v * v * v; }, {}},
      {"pow -1.5", [](const Tensor& x) { return pow(x, -1.5); }, [](double v) { return std::pow(v, -1.5); }, {}, true},
      {"pow 0", [](const Tensor& x) { return pow(x, 0.0); }, [](double) { return 1.0; }, {}},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); },
       [](double v) { return std::min(std::max(v, -0.5), 0.7); }, {-0.5, 0.7}},
      {"clamp min", [](const Tensor& x) { return clamp(x, -0.3, std::nullopt); },
       [](double v) { return std::max(v, -0.3); }, {-0.3}},
      {"clamp max", [](const Tensor& x) { return clamp(x, std::nullopt, 0.2); },
       [](double v) { return std::min(v, 0.2); }, {0.2}},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0.0; }, {0.0}},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); },
       [](double v) { return v > 0 ? v : 0.1 * v; }, {0.0}},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double v) { return 1 / (1 + std::exp(-v)); }, {}},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, {}},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_ref, {}},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref, {}},
  };
}

Tensor unary_input(const UnaryCase& c, const Shape& shape, DType dtype) {
  Tensor x = c.positive_domain ? rand(shape, dtype) * 2.0 + 0.2 : randn(shape, dtype) * 1.5;
  return away_from(x, c.kinks);
}

std::vector<double> map_ref(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return v;
}

}  // namespace

TEST_CASE("unary ops: forward values in float32 and float64, contiguous and strided") {
  for (const UnaryCase& c : unary_cases()) {
    const std::string name = c.name;
    CAPTURE(name);
    for (DType dt : {kFloat32, kFloat64}) {
      Tensor x = unary_input(c, {3, 7}, dt);
      Tensor y = c.op(x);
      CHECK(y.dtype() == dt);
      CHECK(y.shape() == x.shape());
      CHECK(values_near(y, map_ref(x, c.ref), dt == kFloat32 ? 2e-6 : 1e-13));
      Tensor xt = x.t();  // [7, 3], strided
      CHECK(values_near(c.op(xt), map_ref(xt, c.ref), dt == kFloat32 ? 2e-6 : 1e-13));
    }
    Tensor s = unary_input(c, {}, kFloat64);
    CHECK(c.op(s).dim() == 0);
    CHECK(values_near(c.op(s), map_ref(s, c.ref), 1e-13));
    CHECK(c.op(empty({0, 3})).shape() == Shape{0, 3});
  }
  // Large enough for the parallel path.
  Tensor big = randn({70001});
  CHECK(values_near(sigmoid(big), map_ref(big, [](double v) { return 1 / (1 + std::exp(-v)); }), 2e-6));
}

TEST_CASE("unary ops: gradcheck on odd shapes") {
  for (const UnaryCase& c : unary_cases()) {
    const std::string name = c.name;
    CAPTURE(name);
    Tensor x = unary_input(c, {3, 5}, kFloat64).requires_grad_();
    auto op = c.op;
    check_gradients([op](const std::vector<Tensor>& in) { return op(in[0]); }, {x});
    Tensor s = unary_input(c, {}, kFloat64).requires_grad_();
    // (reshaped: check_gradients builds its probe with tensor(), which reads shape {} as 1-D)
    check_gradients([op](const std::vector<Tensor>& in) { return op(in[0]).reshape({1}); }, {s});
  }
  // Through a strided input (gradient flows back through the transpose).
  check_gradients([](const std::vector<Tensor>& in) { return sigmoid(in[0].t()) * tanh(in[0]).t(); },
                  {randn64({3, 4})});
}

TEST_CASE("unary ops: gradients at and beyond the kinks follow PyTorch") {
  Tensor x = tensor({-1.0, -0.5, 0.0, 0.5, 0.7, 1.0}, {6}, kFloat64).requires_grad_();
  Tensor g = ones({6}, kFloat64);
  // As PyTorch 2.x with scalar bounds: 1 strictly inside, 0 on and beyond the bounds.
  clamp(x, -0.5, 0.7).backward(g);
  CHECK(values_near(x.grad(), {0.0, 0.0, 1.0, 1.0, 0.0, 0.0}));
  x.set_grad(Tensor());
  clamp(x, -0.5, std::nullopt).backward(g);
  CHECK(values_near(x.grad(), {0.0, 0.0, 1.0, 1.0, 1.0, 1.0}));
  x.set_grad(Tensor());
  clamp(x, std::nullopt, 0.7).backward(g);
  CHECK(values_near(x.grad(), {1.0, 1.0, 1.0, 1.0, 0.0, 0.0}));
  x.set_grad(Tensor());
  relu(x).backward(g);
  CHECK(values_near(x.grad(), {0.0, 0.0, 0.0, 1.0, 1.0, 1.0}));  // 0 at x == 0
  x.set_grad(Tensor());
  abs(x).backward(g);
  CHECK(values_near(x.grad(), {-1.0, -1.0, 0.0, 1.0, 1.0, 1.0}));
  x.set_grad(Tensor());
  leaky_relu(x, 0.2).backward(g);
  CHECK(values_near(x.grad(), {0.2, 0.2, 0.2, 1.0, 1.0, 1.0}));
  x.set_grad(Tensor());
  pow(x, 0.0).backward(g);
  CHECK(values_near(x.grad(), std::vector<double>(6, 0.0)));  // not NaN at 0
  // relu's gradient at NaN is the incoming one (PyTorch: y <= 0 ? 0 : g; it
  // was 0), in every dtype including the 16-bit bit loop; abs(-0) is +0.
  for (DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(dtype));
    Tensor n = tensor({std::nan(""), -1.0, 0.0, -0.0, 2.0}, {5}, kFloat64).to(dtype).requires_grad_();
    relu(n).backward(full({5}, 3.0, dtype));
    CHECK(n.grad().to(kFloat64).to_vector<double>() == std::vector<double>{3.0, 0.0, 0.0, 0.0, 3.0});
    CHECK_FALSE(std::signbit(abs(tensor({-0.0}, {1}, kFloat64).to(dtype)).to(kFloat64).item<double>()));
  }
}

TEST_CASE("unary ops: special values, integer inputs, clamp corner cases") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor s = tensor({nan, -inf, inf}, {3}, kFloat64);
  CHECK(values_near(relu(s), {nan, 0.0, inf}));
  CHECK(values_near(clamp(s, -1.0, 1.0), {nan, -1.0, 1.0}));
  CHECK(values_near(sigmoid(s), {nan, 0.0, 1.0}));
  CHECK(values_near(clamp(tensor({-2.0, 0.0, 2.0}), 1.0, -1.0), {-1.0, -1.0, -1.0}));  // min > max: all max

  Tensor i = tensor(std::vector<int64_t>{-3, 0, 5}, {3});
  CHECK(neg(i).to_vector<int64_t>() == std::vector<int64_t>{3, 0, -5});
  CHECK(abs(i).to_vector<int64_t>() == std::vector<int64_t>{3, 0, 5});
  CHECK(relu(i).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 5});
  CHECK(clamp(i, -1, std::nullopt).dtype() == kInt64);
  CHECK(clamp(i, -1, std::nullopt).to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 5});
  CHECK(clamp(i, std::nullopt, 2).to_vector<int64_t>() == std::vector<int64_t>{-3, 0, 2});
  // A floating bound computes in float32, as PyTorch's clamp (it was refused).
  CHECK(clamp(i, -1.0, std::nullopt).dtype() == kFloat32);
  CHECK(values_near(clamp(i, 0.5, std::nullopt), {0.5, 0.5, 5}));
  CHECK(values_near(clamp(i, -1, 2.5), {-1, 0, 2.5}));
  CHECK(clamp(i, std::nan(""), std::nullopt).dtype() == kFloat32);
  // int64 bounds past 2^53 are exact (a double holds 2^60 + 2 as 2^60).
  const int64_t big = (int64_t{1} << 60) + 2;
  Tensor b = tensor(std::vector<int64_t>{big + 1, big - 1, -big - 1, 7}, {4});
  CHECK(clamp(b, -big, big).to_vector<int64_t>() == std::vector<int64_t>{big, big - 1, -big, 7});
  CHECK(clamp(b, big, std::nullopt).to_vector<int64_t>() == std::vector<int64_t>{big + 1, big, big, big});
  CHECK(clamp(b, -1, big).to_vector<int64_t>() == std::vector<int64_t>{big, big - 1, -1, 7});
  CHECK(clamp(b, big, -1).to_vector<int64_t>() == std::vector<int64_t>{-1, -1, -1, -1});  // min > max: all max
  Tensor u = tensor(std::vector<uint8_t>{1, 44, 200}, {3});
  CHECK_THROWS_CONTAINS(clamp(u, 300, std::nullopt), "clamp: Clamp min value 300 is outside the representable range of Byte");
  CHECK_THROWS_CONTAINS(clamp(u, std::nullopt, -1), "clamp: Clamp max value -1 is outside the representable range of Byte");
  // A bound past the dtype on its own side clamps nothing (these were refused); PyTorch 2.15's values.
  const Tensor u4 = tensor(std::vector<uint8_t>{7, 9, 3, 0}, {4});
  using U = std::vector<uint8_t>;
  CHECK(clamp(u4, -1, 5).to_vector<uint8_t>() == U{5, 5, 3, 0});
  CHECK(clamp(u4, -300, 5).to_vector<uint8_t>() == U{5, 5, 3, 0});
  CHECK(clamp(u4, 0, 300).to_vector<uint8_t>() == U{7, 9, 3, 0});
  CHECK(clamp(u4, -1, std::nullopt).to_vector<uint8_t>() == U{7, 9, 3, 0});
  CHECK(clamp(u4, std::nullopt, 256).to_vector<uint8_t>() == U{7, 9, 3, 0});
  CHECK(clamp(u4, 255, std::nullopt).to_vector<uint8_t>() == U{255, 255, 255, 255});
  CHECK(clamp(u4, std::nullopt, 0).to_vector<uint8_t>() == U{0, 0, 0, 0});
  const Tensor copy = clamp(u4, -1, 300);  // a new tensor, as PyTorch's
  CHECK(copy.to_vector<uint8_t>() == U{7, 9, 3, 0});
  CHECK(copy.raw_data() != u4.raw_data());
  CHECK(copy.dtype() == kUInt8);
  CHECK_THROWS_CONTAINS(clamp(u4, 256, std::nullopt), "clamp: Clamp min value 256 is outside the representable range");
  CHECK_THROWS_CONTAINS(clamp(u4, 300, -1), "Clamp min value 300 is outside the representable range of Byte");
  CHECK_THROWS_CONTAINS(clamp(u4, -5, -1), "Clamp max value -1 is outside the representable range of Byte");
  CHECK(clamp(u4, 5, 3).to_vector<uint8_t>() == U{3, 3, 3, 3});
  // int64: INT64_MAX as min and INT64_MIN as max are in range (a double's 2^63 was not).
  const Tensor l = tensor(std::vector<int64_t>{7, -9, 3, 0}, {4});
  CHECK(clamp(l, INT64_MAX, std::nullopt).to_vector<int64_t>() == std::vector<int64_t>(4, INT64_MAX));
  CHECK(clamp(l, std::nullopt, INT64_MIN).to_vector<int64_t>() == std::vector<int64_t>(4, INT64_MIN));
  CHECK(clamp(l, std::nullopt, INT64_MAX).to_vector<int64_t>() == std::vector<int64_t>{7, -9, 3, 0});
  CHECK(clamp(l, std::nullopt, uint64_t{1} << 63).to_vector<int64_t>() == std::vector<int64_t>{7, -9, 3, 0});
  CHECK_THROWS_CONTAINS(clamp(l, uint64_t{1} << 63, std::nullopt),
                        "Clamp min value 9.22337e+18 is outside the representable range of Long");
  CHECK_THROWS_CONTAINS(leaky_relu(i), "leaky_relu: expected a float32 or float64 tensor on CPU, got int64");
  CHECK_THROWS_CONTAINS(gelu(i), "gelu: expected a float32 or float64 tensor on CPU, got int64");
}

TEST_CASE("unary ops: integer tensors promote as PyTorch's (values from PyTorch 2.15)") {
  Tensor i = tensor(std::vector<int64_t>{-3, 0, 5}, {3});
  Tensor u = tensor(std::vector<uint8_t>{3, 200}, {2});
  auto is_float32_near = [](const Tensor& t, std::vector<double> want) {
    return t.dtype() == kFloat32 && values_near(t, want, 1e-6);
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(is_float32_near(exp(i), {std::exp(-3.0), 1, std::exp(5.0)}));
  CHECK(is_float32_near(sigmoid(i), {1 / (1 + std::exp(3.0)), 0.5, 1 / (1 + std::exp(-5.0))}));
  CHECK(is_float32_near(tanh(i), {std::tanh(-3.0), 0, std::tanh(5.0)}));
  CHECK(is_float32_near(sqrt(tensor(std::vector<int64_t>{0, 4, 9}, {3})), {0, 2, 3}));
  CHECK(is_float32_near(log(tensor(std::vector<int64_t>{1, 4}, {2})), {0, std::log(4.0)}));
  CHECK(is_float32_near(rsqrt(tensor(std::vector<uint8_t>{4, 16}, {2})), {0.5, 0.25}));
  CHECK(is_float32_near(i.exp(), {std::exp(-3.0), 1, std::exp(5.0)}));
  // pow: a floating exponent computes in float32, an integer one keeps the dtype (wrapping).
  CHECK(is_float32_near(pow(i, 0.5), {nan, 0, std::sqrt(5.0)}));
  CHECK(is_float32_near(pow(i, 2.0), {9, 0, 25}));
  CHECK(pow(i, 2).dtype() == kInt64);
  CHECK(pow(i, 2).to_vector<int64_t>() == std::vector<int64_t>{9, 0, 25});
  CHECK(i.pow(3).to_vector<int64_t>() == std::vector<int64_t>{-27, 0, 125});
  CHECK(pow(i, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1});
  CHECK(pow(i, int64_t{1}).to_vector<int64_t>() == std::vector<int64_t>{-3, 0, 5});
  CHECK(pow(u, 2).to_vector<uint8_t>() == std::vector<uint8_t>{9, 64});  // 40000 mod 256
  CHECK(pow(tensor(std::vector<uint8_t>{2}, {1}), 9).to_vector<uint8_t>() == std::vector<uint8_t>{0});
  CHECK(pow(tensor(std::vector<int64_t>{3}, {1}), 40).to_vector<int64_t>() == std::vector<int64_t>{-6289078614652622815});
  CHECK_THROWS_CONTAINS(pow(i, -1), "pow: Integers to negative integer powers are not allowed.");
  CHECK_THROWS_CONTAINS(pow(i, uint64_t{1} << 63), "pow: value cannot be converted to type int64_t without overflow");
  // Floating tensors keep their dtype whatever the exponent's type.
  CHECK(pow(tensor({2.0}, {1}, kFloat64), 2).dtype() == kFloat64);
  CHECK(values_near(pow(tensor({1.5}, {1}), 2), {2.25}));
}

TEST_CASE("unary ops: errors and method forms") {
  Tensor x = rand({2, 3}) + 0.5;
  CHECK_THROWS_CONTAINS(clamp(x, std::nullopt, std::nullopt), "At least one of 'min' or 'max' must not be None");
  CHECK_THROWS_CONTAINS(gelu(x, "erf"), "approximate argument must be either none or tanh.");
  CHECK_THROWS_CONTAINS(exp(Tensor()), "exp: expected a defined tensor, got an undefined one");
  CHECK_THROWS_CONTAINS(relu(Tensor()), "relu: expected a defined tensor");
  CHECK(allclose(x.exp(), exp(x), 0, 0));
  CHECK(allclose(x.log(), log(x), 0, 0));
  CHECK(allclose(x.sqrt(), sqrt(x), 0, 0));
  CHECK(allclose(x.abs(), abs(x), 0, 0));
  CHECK(allclose(x.relu(), relu(x), 0, 0));
  CHECK(allclose(x.pow(1.5), pow(x, 1.5), 0, 0));
  Tensor r = randn64({3});
  CHECK(exp(r).grad_fn()->name() == "ExpBackward");
  CHECK(relu(r).grad_fn()->name() == "ReluBackward");
  CHECK(gelu(r, "tanh").grad_fn()->name() == "GeluTanhBackward");
}
