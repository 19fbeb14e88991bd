// Elementwise binary ops: forward values against references computed here
// (broadcasting by index arithmetic), strided views, integer tensors,
// sum_to_shape, finite-difference gradients, in-place semantics and error
// paths; and the autograd engine through these ops (a diamond graph). The
// unary ops: tests/test_elementwise_unary.cpp.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "tests/elementwise_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;
using minidl::testing::randn64;
using minidl::testing::values_near;

namespace {

using Fn2 = std::function<double(double, double)>;

// Reference broadcasting by explicit index arithmetic: out[idx] = f(a[idx_a], b[idx_b]).
std::vector<double> ref_broadcast(const Tensor& a, const Tensor& b, const Shape& out_shape, const Fn2& f) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  const size_t n = out_shape.size();
  auto index_of = [&](const Shape& shape, const Shape& idx) {
    int64_t flat = 0;
    const size_t lead = n - shape.size();
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : idx[lead + d]);
    return flat;
  };
  std::vector<double> out;
  Shape idx(n, 0);
  for (int64_t i = 0; i < numel_of(out_shape); ++i) {
    int64_t rest = i;
    for (size_t d = n; d-- > 0;) {
      idx[d] = rest % out_shape[d];
      rest /= out_shape[d];
    }
    out.push_back(f(av[index_of(a.shape(), idx)], bv[index_of(b.shape(), idx)]));
  }
  return out;
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  Fn2 ref;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double x, double y) { return x + y; }},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); },
       [](double x, double y) { return x + 2.5 * y; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double x, double y) { return x - y; }},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, 0.5); },
       [](double x, double y) { return x - 0.5 * y; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double x, double y) { return x * y; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double x, double y) { return x / y; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double x, double y) { return std::max(x, y); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double x, double y) { return std::min(x, y); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
       [](double x, double y) { return x == y ? 1.0 : 0.0; }},
  };
}

}  // namespace

// ---- binary forward ----------------------------------------------------------------

TEST_CASE("binary ops: same-shape forward values") {
  Tensor a = tensor({1.0, -2.0, 3.5, 0.25, 4.0, -1.0}, {2, 3});
  Tensor b = tensor({2.0, 4.0, -0.5, 0.25, 3.0, 8.0}, {2, 3});
  CHECK(values_near(a + b, {3.0, 2.0, 3.0, 0.5, 7.0, 7.0}));
  CHECK(values_near(a - b, {-1.0, -6.0, 4.0, 0.0, 1.0, -9.0}));
  CHECK(values_near(a * b, {2.0, -8.0, -1.75, 0.0625, 12.0, -8.0}));
  CHECK(values_near(a / b, {0.5, -0.5, -7.0, 1.0, 4.0 / 3.0, -0.125}));
  CHECK(values_near(maximum(a, b), {2.0, 4.0, 3.5, 0.25, 4.0, 8.0}));
  CHECK(values_near(minimum(a, b), {1.0, -2.0, -0.5, 0.25, 3.0, -1.0}));
  CHECK(values_near(eq(a, b), {0, 0, 0, 1, 0, 0}));
  CHECK(values_near(gt(a, 1.0), {0, 0, 1, 0, 1, 0}));
  CHECK(values_near(lt(a, 1.0), {0, 1, 0, 1, 0, 1}));
  CHECK((a + b).dtype() == kFloat32);
  CHECK(eq(a, b).dtype() == kFloat32);
  CHECK(eq(a.to(kFloat64), b.to(kFloat64)).dtype() == kFloat64);
}

TEST_CASE("binary ops: broadcasting against an index-arithmetic reference") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 1, 5}, {4, 1}}, {{4, 1}, {3, 1, 5}}, {{2, 3}, {}}, {{}, {2, 3}}, {{}, {}},
      {{5}, {2, 1}},       {{1, 1, 3}, {3}},    {{2, 1, 4}, {1, 3, 1}}, {{0, 3}, {1, 3}}};
  for (const auto& [sa, sb] : shapes) {
    Tensor a = randn(sa, kFloat64);
    Tensor b = rand(sb, kFloat64) + 0.5;  // away from 0 for div
    const Shape out_shape = broadcast_shapes(sa, sb, "test");
    for (const BinaryCase& c : binary_cases()) {
      const std::string name = c.name;
    CAPTURE(name);
      CAPTURE(shape_str(sa));
      CAPTURE(shape_str(sb));
      Tensor y = c.op(a, b);
      CHECK(y.shape() == out_shape);
      CHECK(y.is_contiguous());
      CHECK(values_near(y, ref_broadcast(a, b, out_shape, c.ref), 1e-12));
    }
  }
  // The shape of the task's example.
  CHECK((ones({3, 1, 5}) + ones({4, 1})).shape() == Shape{3, 4, 5});
  CHECK((scalar_tensor(2.0) * scalar_tensor(3.0)).dim() == 0);
  CHECK((scalar_tensor(2.0) * scalar_tensor(3.0)).item() == 6.0);
}

TEST_CASE("binary ops: large tensors take the parallel path and agree with the reference") {
  Tensor a = randn({301, 257});
  Tensor b = randn({257});
  Tensor y = a * b;
  CHECK(values_near(y, ref_broadcast(a, b, {301, 257}, [](double x, double z) {
                      return static_cast<double>(static_cast<float>(x) * static_cast<float>(z));
                    })));
  Tensor big = randn({100003});
  CHECK(values_near(big - big, std::vector<double>(100003, 0.0)));
}

TEST_CASE("binary ops: non-contiguous inputs") {
  Tensor base = randn({4, 6}, kFloat64);
  Tensor bt = base.t();  // [6, 4], strides [1, 6]
  REQUIRE(!bt.is_contiguous());
  Tensor other = randn({6, 4}, kFloat64);
  for (const BinaryCase& c : binary_cases()) {
    const std::string name = c.name;
    CAPTURE(name);
    Tensor pos = rand({6, 4}, kFloat64) + 0.5;
    CHECK(allclose(c.op(bt, other), c.op(bt.contiguous(), other), 0, 0));
    CHECK(allclose(c.op(other, bt), c.op(other, bt.contiguous()), 0, 0));
    CHECK(allclose(c.op(bt, pos), c.op(bt.contiguous(), pos), 0, 0));
  }
  // A strided narrow view broadcast against a column.
  Tensor nar = base.narrow(1, 1, 3);  // [4, 3], row stride 6
  Tensor col = tensor({1.0, 2.0, 3.0, 4.0}, {4, 1}, kFloat64);
  CHECK(values_near(nar * col, ref_broadcast(nar, col, {4, 3}, [](double x, double y) { return x * y; })));
}

TEST_CASE("binary ops: scalar forms and operators") {
  Tensor x = tensor({1.0, 2.0, 4.0});
  CHECK(values_near(x + 1.5, {2.5, 3.5, 5.5}));
  CHECK(values_near(1.5 + x, {2.5, 3.5, 5.5}));
  CHECK(values_near(x - 1.0, {0.0, 1.0, 3.0}));
  CHECK(values_near(10.0 - x, {9.0, 8.0, 6.0}));
  CHECK(values_near(rsub(x, 10.0), {9.0, 8.0, 6.0}));
  CHECK(values_near(x * 3.0, {3.0, 6.0, 12.0}));
  CHECK(values_near(3.0 * x, {3.0, 6.0, 12.0}));
  CHECK(values_near(x / 2.0, {0.5, 1.0, 2.0}));
  CHECK(values_near(8.0 / x, {8.0, 4.0, 2.0}));
  CHECK(values_near(rdiv(x, 8.0), {8.0, 4.0, 2.0}));
  CHECK(values_near(-x, {-1.0, -2.0, -4.0}));
  CHECK((x * 3.0).dtype() == kFloat32);
  CHECK((x.to(kFloat64) * 3.0).dtype() == kFloat64);
}

TEST_CASE("binary ops: integer tensors") {
  Tensor a = tensor(std::vector<int64_t>{1, -2, 3, 7}, {4});
  Tensor b = tensor(std::vector<int64_t>{4, 5, -6, 7}, {4});
  CHECK(a.dtype() == kInt64);
  CHECK((a + b).to_vector<int64_t>() == std::vector<int64_t>{5, 3, -3, 14});
  CHECK((a * b).to_vector<int64_t>() == std::vector<int64_t>{4, -10, -18, 49});
  CHECK(sub(a, b, 2).to_vector<int64_t>() == std::vector<int64_t>{-7, -12, 15, -7});
  CHECK(maximum(a, b).to_vector<int64_t>() == std::vector<int64_t>{4, 5, 3, 7});
  CHECK(eq(a, b).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 1});
  CHECK((a * 3).dtype() == kInt64);
  CHECK((a * 3).to_vector<int64_t>() == std::vector<int64_t>{3, -6, 9, 21});
  CHECK_THROWS_CONTAINS(add(a, b, 0.5), "cannot be represented exactly");
  Tensor u = tensor(std::vector<uint8_t>{250, 3}, {2});
  CHECK((u + 10).dtype() == kUInt8);
  CHECK((u + 10).to_vector<int64_t>() == std::vector<int64_t>{4, 13});  // wraps like PyTorch
  // Integer scalars outside uint8 are taken modulo 256, as PyTorch casts them
  // (values from PyTorch 2.15; minidl refused them before).
  Tensor w = tensor(std::vector<uint8_t>{1, 44, 200}, {3});
  CHECK((w + 256).to_vector<int64_t>() == std::vector<int64_t>{1, 44, 200});
  CHECK((w + 300).to_vector<int64_t>() == std::vector<int64_t>{45, 88, 244});
  CHECK((w * -1).to_vector<int64_t>() == std::vector<int64_t>{255, 212, 56});
  CHECK((300 - w).to_vector<int64_t>() == std::vector<int64_t>{43, 0, 100});
  CHECK(gt(w, 300).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1});
  CHECK(lt(w, 300).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0});
  CHECK(gt(w, -1).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0});
  CHECK(w.clone().add_(300).to_vector<int64_t>() == std::vector<int64_t>{45, 88, 244});
  CHECK(w.clone().mul_(-1).to_vector<int64_t>() == std::vector<int64_t>{255, 212, 56});
  CHECK_THROWS_CONTAINS(add(w, w, 300), "cannot be represented exactly");  // alpha: PyTorch refuses too
  CHECK_THROWS_CONTAINS(w + (uint64_t{1} << 63), "uint8");  // past int64: PyTorch's overflow error
}

// PyTorch's promotion of an integer tensor: with a floating scalar, and in
// true division, it computes in float32 (values from PyTorch 2.15).
TEST_CASE("binary ops: integer tensors with floating scalars and division promote to float32") {
  Tensor a = tensor(std::vector<int64_t>{1, -2, 3, 7}, {4});
  Tensor b = tensor(std::vector<int64_t>{4, 5, -6, 7}, {4});
  Tensor u = tensor(std::vector<uint8_t>{250, 3}, {2});
  auto is_float32_near = [](const Tensor& t, std::vector<double> want) {
    return t.dtype() == kFloat32 && values_near(t, want);
  };
  CHECK(is_float32_near(a * 3.0, {3, -6, 9, 21}));
  CHECK(is_float32_near(3.0 * a, {3, -6, 9, 21}));
  CHECK(is_float32_near(a * 0.5, {0.5, -1, 1.5, 3.5}));
  CHECK(is_float32_near(10.0 - a, {9, 12, 7, 3}));
  CHECK(is_float32_near(a - 0.5f, {0.5, -2.5, 2.5, 6.5}));
  CHECK(is_float32_near(u + 10.0, {260, 13}));
  CHECK(is_float32_near(u * 2.0, {500, 6}));  // was 244 and 6 in uint8
  CHECK(is_float32_near(a / b, {0.25, -0.4, -0.5, 1}));
  CHECK(is_float32_near(a / 2, {0.5, -1, 1.5, 3.5}));
  CHECK(is_float32_near(6 / a, {6, -3, 2, 6.0 / 7}));
  CHECK(is_float32_near(u / u, {1, 1}));
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(is_float32_near(a + inf, {inf, inf, inf, inf}));
  CHECK(is_float32_near(gt(a, 2.5), {0, 0, 1, 1}));
  CHECK(is_float32_near(lt(a, 2.5), {1, 1, 0, 0}));
  CHECK(gt(a, 2).dtype() == kInt64);
  CHECK(gt(a, 2).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1});
  // In place, the result cannot go back into the integer tensor: PyTorch's refusal.
  CHECK_THROWS_CONTAINS(a.mul_(2.0), "mul_: result type Float can't be cast to the desired output type Long");
  CHECK_THROWS_CONTAINS(a.div_(2), "div_: result type Float can't be cast to the desired output type Long");
  CHECK_THROWS_CONTAINS(u.add_(0.5), "add_: result type Float can't be cast to the desired output type Byte");
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3, 7});
  a.add_(1).mul_(2);
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{4, -2, 8, 16});
  // int64 scalars past 2^53 stay exact (the kernels' double argument would round them).
  const int64_t big = (int64_t{1} << 60) + 1;
  Tensor c = tensor(std::vector<int64_t>{big, 3}, {2});
  CHECK((c + big).to_vector<int64_t>() == std::vector<int64_t>{2 * big, big + 3});
  CHECK((c - big).to_vector<int64_t>() == std::vector<int64_t>{0, 3 - big});
  CHECK((big - c).to_vector<int64_t>() == std::vector<int64_t>{0, big - 3});
  CHECK((c * big).to_vector<int64_t>()[1] == 3 * big);
  CHECK(gt(c, big).to_vector<int64_t>() == std::vector<int64_t>{0, 0});
  CHECK(lt(c, big).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK((c.clone().add_(big)).to_vector<int64_t>() == std::vector<int64_t>{2 * big, big + 3});
  CHECK((scalar_tensor(1, kInt64) + big).dim() == 0);
  CHECK((c + (-big)).to_vector<int64_t>() == std::vector<int64_t>{0, 3 - big});
  CHECK((c * std::numeric_limits<int64_t>::min()).to_vector<int64_t>()[1] == std::numeric_limits<int64_t>::min());
  // Floating tensors keep their dtype whatever the scalar's type.
  CHECK((ones({2}, kFloat64) * 2).dtype() == kFloat64);
  CHECK((ones({2}, kBFloat16) * 2.5).dtype() == kBFloat16);
}

TEST_CASE("maximum/minimum propagate NaN") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = tensor({nan, 1.0, 2.0}, {3}, kFloat64);
  Tensor b = tensor({0.0, nan, 1.0}, {3}, kFloat64);
  CHECK(values_near(maximum(a, b), {nan, nan, 2.0}));
  CHECK(values_near(minimum(a, b), {nan, nan, 1.0}));
}

TEST_CASE("binary ops: errors") {
  Tensor f32 = ones({2, 3});
  Tensor f64 = ones({2, 3}, kFloat64);
  CHECK_THROWS_CONTAINS(f32 + f64, "add: expected both tensors to have the same dtype, got float32 and float64");
  CHECK_THROWS_CONTAINS(f64 * f32, "mul: expected both tensors to have the same dtype, got float64 and float32");
  CHECK_THROWS_CONTAINS(maximum(f32, f64), "maximum: expected both tensors to have the same dtype");
  CHECK_THROWS_CONTAINS(eq(f32, f64), "eq: expected both tensors to have the same dtype");
  CHECK_THROWS_CONTAINS(ones({2, 3}) + ones({4}),
                        "add: The size of tensor a (3) must match the size of tensor b (4) "
                        "at non-singleton dimension 1");
  // PyTorch names the trailing-most mismatch (minidl named the first: a (2), b (3) at dimension 0).
  CHECK_THROWS_CONTAINS(ones({2, 3}) + ones({3, 2}),
                        "add: The size of tensor a (3) must match the size of tensor b (2) "
                        "at non-singleton dimension 1");
  CHECK_THROWS_CONTAINS(ones({2, 3, 4}) * ones({3, 3, 5}),
                        "mul: The size of tensor a (4) must match the size of tensor b (5) "
                        "at non-singleton dimension 2");
  CHECK_THROWS_CONTAINS(ones({2, 3}) / ones({3, 3}), "div: The size of tensor a (2) must match");
  CHECK_THROWS_CONTAINS(Tensor() + f32, "add: expected defined tensors, got an undefined first argument");
  CHECK_THROWS_CONTAINS(f32 - Tensor(), "sub: expected defined tensors, got an undefined second argument");
  CHECK_THROWS_CONTAINS(Tensor() * 2.0, "mul: expected a defined tensor");
  CHECK_THROWS_CONTAINS(leaky_relu(ones({2}, kInt64)), "leaky_relu: expected a float32 or float64 tensor on CPU, got int64");
  CHECK_THROWS_CONTAINS(ones({2}, kInt64) / ones({2}), "div: expected both tensors to have the same dtype, got int64 and float32");
}

// ---- sum_to_shape ----------------------------------------------------------------------

TEST_CASE("sum_to_shape reduces broadcast dims") {
  Tensor g = arange(24.0, kFloat64).reshape({2, 3, 4});
  const std::vector<double> v = g.to_vector<double>();
  auto at = [&](int64_t i, int64_t j, int64_t k) { return v[(i * 3 + j) * 4 + k]; };

  Tensor s1 = sum_to_shape(g, {3, 1});  // sum over dim 0 (leading) and dim 2 (size 1)
  CHECK(s1.shape() == Shape{3, 1});
  std::vector<double> e1(3, 0.0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) e1[j] += at(i, j, k);
  CHECK(values_near(s1, e1));

  Tensor s2 = sum_to_shape(g, {4});
  std::vector<double> e2(4, 0.0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) e2[k] += at(i, j, k);
  CHECK(values_near(s2, e2));

  Tensor s3 = sum_to_shape(g, {2, 1, 4});
  std::vector<double> e3(8, 0.0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) e3[i * 4 + k] += at(i, j, k);
  CHECK(values_near(s3, e3));

  CHECK(sum_to_shape(g, {}).dim() == 0);
  CHECK(sum_to_shape(g, {}).item() == 276.0);
  CHECK(sum_to_shape(g, {1, 1}).item() == 276.0);
  CHECK(sum_to_shape(g, {2, 3, 4}).is_same(g));
  // A strided gradient.
  Tensor gt_ = g.transpose(0, 2);  // [4, 3, 2]
  CHECK(values_near(sum_to_shape(gt_, {4, 1, 1}), e2));

  CHECK_THROWS_CONTAINS(sum_to_shape(g, {5}), "sum_to_shape: size [5] is not expandable to size [2, 3, 4]");
  CHECK_THROWS_CONTAINS(sum_to_shape(g, {1, 2, 3, 4}), "is not expandable");
  check_gradients([](const std::vector<Tensor>& in) { return sum_to_shape(in[0], {3, 1}); },
                  {randn64({2, 3, 5})});
}

// ---- binary gradients ------------------------------------------------------------------

TEST_CASE("binary ops: gradcheck with broadcasting") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 5}, {3, 5}}, {{3, 1, 5}, {4, 1}}, {{2, 3}, {}}, {{}, {3, 2}}, {{5}, {2, 1}}};
  for (const auto& [sa, sb] : shapes) {
    CAPTURE(shape_str(sa));
    CAPTURE(shape_str(sb));
    auto a = [&] { return randn64(sa); };
    auto b_pos = [&] { return (rand(sb, kFloat64) + 0.5).detach().requires_grad_(); };
    check_gradients([](const std::vector<Tensor>& in) { return in[0] + in[1]; }, {a(), randn64(sb)});
    check_gradients([](const std::vector<Tensor>& in) { return add(in[0], in[1], -1.5); }, {a(), randn64(sb)});
    check_gradients([](const std::vector<Tensor>& in) { return in[0] - in[1]; }, {a(), randn64(sb)});
    check_gradients([](const std::vector<Tensor>& in) { return sub(in[0], in[1], 0.25); }, {a(), randn64(sb)});
    check_gradients([](const std::vector<Tensor>& in) { return in[0] * in[1]; }, {a(), randn64(sb)});
    check_gradients([](const std::vector<Tensor>& in) { return in[0] / in[1]; }, {a(), b_pos()});
  }
}

TEST_CASE("maximum/minimum: gradcheck away from ties, and ties split the gradient") {
  manual_seed(7);
  Tensor a = randn({3, 1, 5}, kFloat64), b = randn({4, 1}, kFloat64);
  // Finite differences need every broadcast pair well apart.
  const std::vector<double> gaps =
      ref_broadcast(a, b, {3, 4, 5}, [](double x, double y) { return std::abs(x - y); });
  REQUIRE(*std::min_element(gaps.begin(), gaps.end()) > 1e-3);
  a.requires_grad_();
  b.requires_grad_();
  check_gradients([](const std::vector<Tensor>& in) { return maximum(in[0], in[1]); }, {a, b});
  check_gradients([](const std::vector<Tensor>& in) { return minimum(in[0], in[1]); }, {a, b});

  Tensor x = tensor({1.0, 2.0, 3.0}, {3}, kFloat64).requires_grad_();
  Tensor y = tensor({0.0, 2.0, 5.0}, {3}, kFloat64).requires_grad_();
  maximum(x, y).backward(tensor({1.0, 1.0, 1.0}, {3}, kFloat64));
  CHECK(values_near(x.grad(), {1.0, 0.5, 0.0}));
  CHECK(values_near(y.grad(), {0.0, 0.5, 1.0}));
  x.set_grad(Tensor());
  y.set_grad(Tensor());
  minimum(x, y).backward(tensor({2.0, 2.0, 2.0}, {3}, kFloat64));
  CHECK(values_near(x.grad(), {0.0, 1.0, 2.0}));
  CHECK(values_near(y.grad(), {2.0, 1.0, 0.0}));
  // A NaN operand: every comparison is false, and PyTorch gives both inputs
  // the whole gradient (only b got it).
  for (bool max : {true, false}) {
    Tensor p = tensor({std::nan(""), 1.0}, {2}, kFloat64).requires_grad_();
    Tensor q = tensor({1.0, std::nan("")}, {2}, kFloat64).requires_grad_();
    (max ? maximum(p, q) : minimum(p, q)).backward(tensor({3.0, 3.0}, {2}, kFloat64));
    CHECK(values_near(p.grad(), {3.0, 3.0}));
    CHECK(values_near(q.grad(), {3.0, 3.0}));
  }
}

TEST_CASE("div backward in float16: -g ((a / b) / b), as PyTorch, not (g / b) first") {
  // PyTorch 2.15: db = [-0, -9992]; g / b = 1e5 overflowed float16 to inf first (nan, -inf).
  Tensor a = tensor({0.0, 1e-4}, {2}, kFloat16).requires_grad_();
  Tensor b = full({2}, 1e-3, kFloat16).requires_grad_();
  div(a, b).backward(full({2}, 100.0, kFloat16));
  const std::vector<double> db = b.grad().to_vector<double>();
  CHECK(db[0] == 0.0);
  CHECK(std::signbit(db[0]));
  CHECK(db[1] == -9992.0);
}

TEST_CASE("binary ops: scalar forms gradcheck") {
  check_gradients([](const std::vector<Tensor>& in) { return in[0] + 2.0; }, {randn64({3, 4})});
  check_gradients([](const std::vector<Tensor>& in) { return in[0] - 2.0; }, {randn64({3, 4})});
  check_gradients([](const std::vector<Tensor>& in) { return 2.0 - in[0]; }, {randn64({3, 4})});
  check_gradients([](const std::vector<Tensor>& in) { return in[0] * -3.0; }, {randn64({3, 4})});
  check_gradients([](const std::vector<Tensor>& in) { return in[0] / 3.0; }, {randn64({3, 4})});
  check_gradients([](const std::vector<Tensor>& in) { return 3.0 / in[0]; },
                  {(rand({3, 4}, kFloat64) + 0.5).detach().requires_grad_()});
  check_gradients([](const std::vector<Tensor>& in) { return -in[0]; }, {randn64({3, 4})});
}

TEST_CASE("binary ops: grads only for inputs that need them; grad_fn names; comparisons are not differentiable") {
  Tensor a = randn64({3, 4});
  Tensor b = randn({4}, kFloat64);  // no grad
  Tensor y = a * b;
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "MulBackward");
  CHECK((a + b).grad_fn()->name() == "AddBackward");
  CHECK((a - b).grad_fn()->name() == "SubBackward");
  CHECK((a / b).grad_fn()->name() == "DivBackward");
  CHECK(maximum(a, b).grad_fn()->name() == "MaximumBackward");
  CHECK(minimum(a, b).grad_fn()->name() == "MinimumBackward");
  y.backward(ones({3, 4}, kFloat64));
  CHECK(!b.grad().defined());
  CHECK(values_near(a.grad(), ref_broadcast(ones({3, 4}, kFloat64), b, {3, 4}, [](double, double z) { return z; })));
  CHECK(!eq(a, a).requires_grad());
  CHECK(!gt(a, 0.0).requires_grad());
  CHECK(!lt(a, 0.0).requires_grad());
  {
    NoGradGuard no_grad;
    CHECK(!(a * a).requires_grad());
  }
}

// ---- in-place --------------------------------------------------------------------------

TEST_CASE("in-place ops: values, broadcasting and version counter") {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  const uint64_t v0 = x.version();
  x.add_(tensor({10.0, 20.0, 30.0}, {3}), 2.0);
  CHECK(values_near(x, {21.0, 42.0, 63.0, 24.0, 45.0, 66.0}));
  CHECK(x.version() == v0 + 1);
  x.sub_(tensor({1.0, 2.0}, {2, 1}));
  CHECK(values_near(x, {20.0, 41.0, 62.0, 22.0, 43.0, 64.0}));
  x.mul_(tensor({0.5}, {1}));
  CHECK(values_near(x, {10.0, 20.5, 31.0, 11.0, 21.5, 32.0}));
  x.add_(1.0);
  x.mul_(2.0);
  x.div_(4.0);
  CHECK(values_near(x, {5.5, 10.75, 16.0, 6.0, 11.25, 16.5}));
  x.fill_(7.0);
  CHECK(values_near(x, std::vector<double>(6, 7.0)));
  x.zero_();
  CHECK(values_near(x, std::vector<double>(6, 0.0)));
  CHECK(x.version() == v0 + 8);
  Tensor& ref = x.add_(1.0);
  CHECK(&ref == &x);  // returns *this, so calls chain

  Tensor n = tensor(std::vector<int64_t>{1, 2}, {2});
  n.mul_(3).add_(1);
  CHECK(n.to_vector<int64_t>() == std::vector<int64_t>{4, 7});
  CHECK_THROWS_CONTAINS(n.div_(2.0), "div_: result type Float can't be cast to the desired output type Long");
  CHECK(n.fill_(0.5).to_vector<int64_t>() == std::vector<int64_t>{0, 0});  // truncated, as PyTorch's fill_
}

TEST_CASE("in-place ops write through non-contiguous views") {
  Tensor x = arange(12.0).reshape({3, 4});
  x.narrow(1, 1, 2).zero_();
  CHECK(values_near(x, {0, 0, 0, 3, 4, 0, 0, 7, 8, 0, 0, 11}));
  x.t().narrow(0, 3, 1).add_(100.0);  // column 3 through a transposed view
  CHECK(values_near(x, {0, 0, 0, 103, 4, 0, 0, 107, 8, 0, 0, 111}));
  x.select(0, 1).mul_(tensor({1.0, 2.0, 3.0, 4.0}, {4}));
  CHECK(values_near(x, {0, 0, 0, 103, 4, 0, 0, 428, 8, 0, 0, 111}));
  x.t().fill_(1.0);
  CHECK(values_near(x, std::vector<double>(12, 1.0)));
  // Any view shares the version counter with its base.
  const uint64_t v = x.version();
  x.narrow(0, 0, 1).add_(1.0);
  CHECK(x.version() == v + 1);
}

TEST_CASE("in-place ops with an operand that aliases self") {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2});
  x.add_(x);
  CHECK(values_near(x, {2.0, 4.0, 6.0, 8.0}));
  x.mul_(x);
  CHECK(values_near(x, {4.0, 16.0, 36.0, 64.0}));
  // Transposed self: every element must read the old values.
  Tensor y = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2});
  y.add_(y.t());
  CHECK(values_near(y, {2.0, 5.0, 5.0, 8.0}));
  // A row of self broadcast over self: row 0 must not be read after it was written.
  Tensor z = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {3, 2});
  z.add_(z[0]);
  CHECK(values_near(z, {2.0, 4.0, 4.0, 6.0, 6.0, 8.0}));
  // Overlapping shifted windows of the same storage.
  Tensor w = arange(6.0);
  w.narrow(0, 1, 5).sub_(w.narrow(0, 0, 5));
  CHECK(values_near(w, {0.0, 1.0, 1.0, 1.0, 1.0, 1.0}));
}

TEST_CASE("in-place ops: autograd and shape errors") {
  Tensor leaf = randn({3}).requires_grad_();
  CHECK_THROWS_CONTAINS(leaf.add_(1.0), "a leaf Variable that requires grad is being used in an in-place operation.");
  CHECK_THROWS_CONTAINS(leaf.mul_(ones({3})), "a leaf Variable that requires grad");
  CHECK_THROWS_CONTAINS(leaf.zero_(), "a leaf Variable that requires grad");
  Tensor nonleaf = leaf * 2.0;
  CHECK_THROWS_CONTAINS(nonleaf.add_(1.0), "add_: in-place operations on tensors that require grad are not supported");
  CHECK_THROWS_CONTAINS(ones({3}).add_(leaf), "add_: the operand requires grad");
  {
    NoGradGuard no_grad;  // optimizer-style updates are fine
    leaf.add_(ones({3}), -0.5);
    leaf.zero_();
    CHECK(values_near(leaf, {0.0, 0.0, 0.0}));
  }
  CHECK(leaf.is_leaf());
  CHECK(leaf.requires_grad());

  Tensor x = ones({3});
  CHECK_THROWS_CONTAINS(x.add_(ones({2, 3})), "add_: output with shape [3] doesn't match the broadcast shape [2, 3]");
  CHECK_THROWS_CONTAINS(x.mul_(ones({4})), "mul_: The size of tensor a (3) must match the size of tensor b (4)");
  CHECK_THROWS_CONTAINS(x.add_(ones({3}, kFloat64)), "add_: expected both tensors to have the same dtype, got float32 and float64");
  CHECK_THROWS_CONTAINS(x.add_(Tensor()), "add_: expected defined tensors");
  CHECK_THROWS_CONTAINS(Tensor().add_(1.0), "add_: expected a defined tensor");
  Tensor expanded = ones({1, 3}).expand({4, 3});
  CHECK_THROWS_CONTAINS(expanded.add_(1.0), "more than one element of the written-to tensor refers to a single memory location");
  CHECK_THROWS_CONTAINS(expanded.fill_(1.0), "single memory location");
}

TEST_CASE("modifying a saved tensor in place is detected at backward") {
  Tensor x = randn64({4});
  Tensor y = exp(x);  // saves its output
  Tensor z = y * 2.0;
  {
    NoGradGuard no_grad;
    y.add_(1.0);
  }
  CHECK_THROWS_CONTAINS(z.backward(ones({4}, kFloat64)), "modified by an inplace operation");
}

// ---- the autograd engine through these ops ------------------------------------------------

TEST_CASE("diamond graph: a -> (b = 2a, c = a + 1) -> d = b * c") {
  Tensor a = tensor({0.5, -1.0, 2.0}, {3}, kFloat64).requires_grad_();
  Tensor b = a * 2.0;
  Tensor c = a + 1.0;
  Tensor d = b * c;  // 2a^2 + 2a, dd/da = 4a + 2
  d.backward(ones({3}, kFloat64));
  CHECK(values_near(d, {1.5, 0.0, 12.0}));
  CHECK(values_near(a.grad(), {4.0, -2.0, 10.0}));
  // Reused inputs accumulate: e = a*a + a, de/da = 2a + 1, added onto the previous grad.
  Tensor e = a * a + a;
  e.backward(ones({3}, kFloat64));
  CHECK(values_near(a.grad(), {6.0, -3.0, 15.0}));
  check_gradients(
      [](const std::vector<Tensor>& in) {
        Tensor bb = in[0] * 2.0, cc = in[0] + 1.0;
        return sigmoid(bb * cc) - tanh(cc) / (bb * bb + 1.0);
      },
      {randn64({2, 3})});
}
