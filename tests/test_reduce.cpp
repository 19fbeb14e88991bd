// Reductions: values against brute-force index loops written here, keepdim
// shapes, strided inputs, float32 accuracy, gradient checks, error paths.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;

namespace {

// Reference: for every output position (keepdim layout), the input values
// reduced into it, in row-major order of the input.
std::vector<std::vector<double>> groups(const std::vector<double>& v, const Shape& shape, Shape dims) {
  const auto nd = static_cast<int64_t>(shape.size());
  std::set<int64_t> red;
  if (dims.empty())
    for (int64_t d = 0; d < nd; ++d) red.insert(d);
  for (int64_t d : dims) red.insert(d < 0 ? d + nd : d);
  Shape kept = shape;
  for (int64_t d : red) kept[d] = 1;
  std::vector<std::vector<double>> out(static_cast<size_t>(numel_of(kept)));
  Shape idx(shape.size(), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < nd; ++d) o = o * kept[d] + (red.count(d) ? 0 : idx[d]);
    out[o].push_back(v[i]);
    for (int64_t d = nd - 1; d >= 0; --d) {  // advance the row-major counter
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double x : g) s += x;
  return s;
}
double ref_var(const std::vector<double>& g, bool unbiased) {
  const double m = ref_sum(g) / static_cast<double>(g.size());
  double s = 0;
  for (double x : g) s += (x - m) * (x - m);
  return s / static_cast<double>(g.size() - (unbiased ? 1 : 0));
}

std::vector<double> apply_ref(const Tensor& x, const Shape& dims, const std::string& what) {
  std::vector<double> out;
  for (const auto& g : groups(x.to_vector<double>(), x.shape(), dims)) {
    if (what == "sum") out.push_back(ref_sum(g));
    if (what == "mean") out.push_back(ref_sum(g) / static_cast<double>(g.size()));
    if (what == "var") out.push_back(ref_var(g, true));
    if (what == "var_biased") out.push_back(ref_var(g, false));
  }
  return out;
}

void check_values(const Tensor& got, const std::vector<double>& want, double rtol) {
  std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i)
    CHECK_MESSAGE(std::abs(v[i] - want[i]) <= 1e-6 + rtol * std::abs(want[i]), "element ", i, ": ", v[i],
                  " vs ", want[i]);
}

Shape keepdim_shape(const Shape& shape, Shape dims) {
  Shape out = shape;
  if (dims.empty()) std::fill(out.begin(), out.end(), 1);
  for (int64_t d : dims) out[d < 0 ? d + static_cast<int64_t>(shape.size()) : d] = 1;
  return out;
}

Shape squeezed_shape(const Shape& shape, Shape dims) {
  Shape k = keepdim_shape(shape, dims), out;
  std::set<int64_t> red;
  for (int64_t d : dims) red.insert(d < 0 ? d + static_cast<int64_t>(shape.size()) : d);
  for (size_t d = 0; d < shape.size(); ++d)
    if (!dims.empty() && !red.count(static_cast<int64_t>(d))) out.push_back(shape[d]);
  return out;
}

// A float64 leaf of distinct values (no ties), shuffled.
Tensor distinct_values(const Shape& shape) {
  std::vector<double> v = randperm(numel_of(shape)).to_vector<double>();
  for (double& e : v) e = e * 0.37 - 3.0;  // neighbours 0.37 apart, far beyond the finite-difference step
  return tensor(v, shape, kFloat64).requires_grad_(true);
}

// check_gradients seeds backward with a [1]-shaped probe for a 0-d output, so
// 0-d results are checked as one-element vectors.
Tensor as_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

}  // namespace

TEST_CASE("sum, mean and var match brute force over several dim sets, float32 and float64") {
  manual_seed(1);
  const Shape shape{3, 5, 7, 6};
  for (DType dt : {kFloat64, kFloat32}) {
    Tensor x = randn(shape, dt);
    const double rtol = dt == kFloat32 ? 1e-5 : 1e-12;
    for (const Shape& dims : std::vector<Shape>{{0, 2, 3}, {1}, {-1}, {}, {3, 0}, {-4, 1, 2, 3}}) {
      CAPTURE(shape_str(dims));
      for (bool keepdim : {false, true}) {
        const Shape want_shape = keepdim ? keepdim_shape(shape, dims) : squeezed_shape(shape, dims);
        Tensor s = x.sum(dims, keepdim), m = x.mean(dims, keepdim), v = x.var(dims, true, keepdim),
               vb = x.var(dims, false, keepdim);
        CHECK(s.shape() == want_shape);
        CHECK(m.shape() == want_shape);
        CHECK(v.shape() == want_shape);
        CHECK(s.dtype() == dt);
        check_values(s, apply_ref(x, dims, "sum"), rtol);
        check_values(m, apply_ref(x, dims, "mean"), rtol);
        check_values(v, apply_ref(x, dims, "var"), rtol);
        check_values(vb, apply_ref(x, dims, "var_biased"), rtol);
      }
    }
    // Whole-tensor forms give 0-d tensors.
    CHECK(x.sum().dim() == 0);
    check_values(x.sum(), apply_ref(x, {}, "sum"), rtol);
    check_values(x.mean(), apply_ref(x, {}, "mean"), rtol);
    check_values(x.var(), apply_ref(x, {}, "var"), rtol);
    check_values(x.var(false), apply_ref(x, {}, "var_biased"), rtol);
  }
}

TEST_CASE("reductions of non-contiguous views") {
  manual_seed(2);
  Tensor base = randn({6, 5, 4}, kFloat64);
  Tensor t = base.transpose(0, 2);  // [4, 5, 6], strided
  REQUIRE(!t.is_contiguous());
  for (const Shape& dims : std::vector<Shape>{{0}, {1, 2}, {-1}, {}}) {
    check_values(t.sum(dims), apply_ref(t, dims, "sum"), 1e-12);
    check_values(t.var(dims), apply_ref(t, dims, "var"), 1e-12);
  }
  Tensor e = tensor({1, 2, 3}).expand({4, 3});  // stride 0 along dim 0
  CHECK(e.sum({0}).to_vector<double>() == std::vector<double>{4, 8, 12});
  CHECK(e.sum({1}).to_vector<double>() == std::vector<double>{6, 6, 6, 6});
  CHECK(e.var({0}).to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(e.argmax().item<int64_t>() == 2);
  Tensor n = base.narrow(1, 1, 3);  // [6, 3, 4] with a gap between rows
  check_values(n.mean({0, 2}), apply_ref(n, {0, 2}, "mean"), 1e-12);
  auto mx = max(t, 1);
  std::vector<double> tv = t.to_vector<double>();
  std::vector<double> got = mx.values.to_vector<double>();
  std::vector<int64_t> idx = mx.indices.to_vector<int64_t>();
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t k = 0; k < 6; ++k) {
      double best = -1e300;
      int64_t arg = -1;
      for (int64_t j = 0; j < 5; ++j)
        if (tv[(i * 5 + j) * 6 + k] > best) best = tv[(i * 5 + j) * 6 + k], arg = j;
      CHECK(got[i * 6 + k] == best);
      CHECK(idx[i * 6 + k] == arg);
    }
}

TEST_CASE("rows read in place as segments, across chunk boundaries") {
  manual_seed(6);
  Tensor x = randn({3, 4, 20001}, kFloat64);  // over {0, 2}: 3 segments of 20001 per output
  check_values(x.sum({0, 2}), apply_ref(x, {0, 2}, "sum"), 1e-12);
  check_values(x.var({0, 2}), apply_ref(x, {0, 2}, "var"), 1e-12);
  check_values(x.to(kFloat32).mean({0, 2}, true), apply_ref(x, {0, 2}, "mean"), 1e-5);

  // A narrowed view: 40 segments of 2000; the extremes sit at known places.
  std::vector<double> v(40 * 3000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i));
  v[17 * 3000 + 1234] = 5.0;
  v[39 * 3000 + 1999] = -5.0;
  v[2 * 3000 + 2500] = 9.0;  // outside the view
  Tensor view = tensor(v, {40, 3000}).narrow(1, 0, 2000);
  CHECK(view.argmax().item<int64_t>() == 17 * 2000 + 1234);
  CHECK(view.max().item<double>() == 5.0);
  CHECK(view.min().item<double>() == -5.0);
  check_values(view.sum(), apply_ref(view, {}, "sum"), 1e-10);
  CHECK(max(view, 1).indices.to_vector<int64_t>()[17] == 1234);
}

TEST_CASE("float32 sums accumulate in double") {
  const double tenth = static_cast<double>(0.1f);
  Tensor x = full({1000000}, 0.1);
  CHECK(std::abs(x.sum().item<double>() - 1e6 * tenth) <= 1e-6 * 1e6 * tenth);
  CHECK(std::abs(x.mean().item<double>() - tenth) <= 1e-6 * tenth);
  // Two long rows (several chunks each) reduced along the last dim.
  Tensor rows = full({2, 300001}, 0.1);
  for (double v : rows.sum({1}).to_vector<double>()) CHECK(std::abs(v - 300001 * tenth) <= 1e-6 * 300001 * tenth);
  // Reduced dims ahead of kept ones: whole output rows accumulate down the batch.
  for (double v : full({200000, 3}, 0.1).sum({0}).to_vector<double>())
    CHECK(std::abs(v - 200000 * tenth) <= 1e-6 * 200000 * tenth);
  // Variance of a large offset with unit spread: naive float32 formulas lose it.
  std::vector<float> a(1000000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 1000.0f + ((i % 2) ? 1.0f : -1.0f);
  Tensor y = tensor(a);
  CHECK(std::abs(y.var(false).item<double>() - 1.0) <= 1e-6);
  CHECK(std::abs(y.var(true).item<double>() - 1e6 / (1e6 - 1)) <= 1e-6);
}

TEST_CASE("results do not depend on the thread count") {
  manual_seed(3);
  Tensor x = randn({3, 100003});
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> s1 = x.sum({1}).to_vector<float>(), v1 = x.var().to_vector<float>();
  omp_set_num_threads(2);
  std::vector<float> s2 = x.sum({1}).to_vector<float>(), v2 = x.var().to_vector<float>();
  omp_set_num_threads(saved);
  CHECK(s1 == s2);
  CHECK(v1 == v2);
}

TEST_CASE("max, min and argmax: values, first index on ties, NaN propagates") {
  Tensor x = tensor({1, 7, 3, 7, -2, 0, 5, -2, 4, 1, 1, 6}, {3, 4});
  CHECK(x.max().item<double>() == 7);
  CHECK(x.min().item<double>() == -2);
  CHECK(x.argmax().item<int64_t>() == 1);  // first of the two 7s, flattened
  auto m1 = max(x, 1);
  CHECK(m1.values.to_vector<double>() == std::vector<double>{7, 5, 6});
  CHECK(m1.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  CHECK(m1.indices.dtype() == kInt64);
  auto n0 = min(x, 0, true);
  CHECK(n0.values.shape() == Shape{1, 4});
  CHECK(n0.values.to_vector<double>() == std::vector<double>{-2, 0, 1, -2});
  CHECK(n0.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 1, 2, 1});
  CHECK(x.argmax(0).to_vector<int64_t>() == std::vector<int64_t>{2, 0, 1, 0});
  CHECK(x.argmax(-1, true).shape() == Shape{3, 1});
  CHECK(x.argmax(-1, true).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});

  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor y = tensor({1.0, nan, 2.0});
  CHECK(std::isnan(y.max().item<double>()));
  CHECK(std::isnan(y.min().item<double>()));
  CHECK(y.argmax().item<int64_t>() == 1);
  std::vector<double> row(2 * 100);
  for (size_t k = 0; k < row.size(); ++k) row[k] = std::cos(static_cast<double>(k));
  row[57] = nan;
  row[80] = 3.0;
  row[100 + 80] = 3.0;
  Tensor rows = tensor(row, {2, 100});
  auto rm = max(rows, 1);
  CHECK(std::isnan(rm.values.to_vector<double>()[0]));
  CHECK(rm.indices.to_vector<int64_t>() == std::vector<int64_t>{57, 80});
  CHECK(min(rows, 1).indices.to_vector<int64_t>()[0] == 57);
  CHECK(rows.argmax(1).to_vector<int64_t>() == std::vector<int64_t>{57, 80});

  Tensor i = tensor(std::vector<int64_t>{4, -9, 12, 3});
  CHECK(i.max().item<int64_t>() == 12);
  CHECK(i.max().dtype() == kInt64);
  CHECK(i.sum().item<int64_t>() == 10);
  CHECK(i.sum().dtype() == kInt64);
  CHECK(i.reshape({2, 2}).sum({0}).to_vector<int64_t>() == std::vector<int64_t>{16, -6});
  CHECK(i.reshape({2, 2}).sum({1}).to_vector<int64_t>() == std::vector<int64_t>{-5, 15});
  Tensor u = tensor(std::vector<uint8_t>{200, 100, 250});
  CHECK(u.sum().item<int64_t>() == 550);  // promoted, no uint8 overflow
  CHECK(u.min().item<int64_t>() == 100);
}

TEST_CASE("empty and 0-d inputs") {
  CHECK(zeros({0}).sum().item<double>() == 0.0);
  CHECK(zeros({2, 0}).sum({1}).to_vector<double>() == std::vector<double>{0, 0});
  CHECK(zeros({0, 3}).sum({0}).to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(std::isnan(zeros({0}).mean().item<double>()));
  CHECK(std::isnan(zeros({0}).var().item<double>()));
  CHECK(std::isnan(ones({1}).var().item<double>()));  // n - 1 == 0
  CHECK(ones({1}).var(false).item<double>() == 0.0);
  auto e = max(zeros({0, 3}), 1);
  CHECK(e.values.shape() == Shape{0});
  CHECK(e.indices.shape() == Shape{0});

  Tensor s = scalar_tensor(3.5);
  CHECK(s.sum().item<double>() == 3.5);
  CHECK(s.sum({0}).dim() == 0);
  CHECK(s.sum({-1}, true).dim() == 0);
  auto m = max(s, 0);
  CHECK(m.values.item<double>() == 3.5);
  CHECK(m.indices.item<int64_t>() == 0);
  CHECK(s.argmax().item<int64_t>() == 0);
}

TEST_CASE("gradients of sum, mean and var") {
  manual_seed(4);
  Tensor x = randn({3, 4, 5}, kFloat64).requires_grad_(true);
  for (const Shape& dims : std::vector<Shape>{{0, 2}, {1}, {-1}, {}}) {
    CAPTURE(shape_str(dims));
    for (bool keepdim : {false, true}) {
      check_gradients([&](const std::vector<Tensor>& in) { return as_1d(in[0].sum(dims, keepdim)); }, {x});
      check_gradients([&](const std::vector<Tensor>& in) { return as_1d(in[0].mean(dims, keepdim)); }, {x});
      check_gradients([&](const std::vector<Tensor>& in) { return as_1d(in[0].var(dims, true, keepdim)); }, {x});
      check_gradients([&](const std::vector<Tensor>& in) { return as_1d(in[0].var(dims, false, keepdim)); }, {x});
    }
  }
  check_gradients([](const std::vector<Tensor>& in) { return as_1d(in[0].sum()); }, {x});
  check_gradients([](const std::vector<Tensor>& in) { return as_1d(in[0].var()); }, {x});
  // Through a strided view, so the gradient lands back at the right places.
  check_gradients([](const std::vector<Tensor>& in) { return as_1d(in[0].transpose(0, 2).var({0, 1})); }, {x});
}

TEST_CASE("gradients of max and min") {
  manual_seed(5);
  Tensor x = distinct_values({3, 4, 5});
  check_gradients([](const std::vector<Tensor>& in) { return as_1d(in[0].max()); }, {x});
  check_gradients([](const std::vector<Tensor>& in) { return as_1d(in[0].min()); }, {x});
  for (int64_t dim : {0, 1, -1})
    for (bool keepdim : {false, true}) {
      CAPTURE(dim);
      check_gradients([&](const std::vector<Tensor>& in) { return as_1d(max(in[0], dim, keepdim).values); }, {x});
      check_gradients([&](const std::vector<Tensor>& in) { return as_1d(min(in[0], dim, keepdim).values); }, {x});
    }
  check_gradients([](const std::vector<Tensor>& in) { return as_1d(max(in[0].transpose(0, 1), 2).values); }, {x});
}

TEST_CASE("whole-tensor max spreads the gradient evenly over ties; max along a dim picks the index") {
  Tensor x = tensor({1, 3, 3, 2}, {}, kFloat64).requires_grad_(true);
  x.max().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0.5, 0});
  Tensor y = tensor({1, 3, 3, 2}, {}, kFloat64).requires_grad_(true);
  max(y, 0).values.backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0});
  Tensor z = tensor({1, 3, 3, 2}, {}, kFloat64).requires_grad_(true);
  min(z, 0).values.backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 0});
}

TEST_CASE("var({d}) reduces dim d") {
  Tensor x = tensor({1, 2, 4, 8, 3, 3}, {2, 3}, kFloat64);
  CHECK(x.var({1}).shape() == Shape{2});
  CHECK(x.var({0}).to_vector<double>() == std::vector<double>{24.5, 0.5, 0.5});
  CHECK(allclose(var(x, {1}, false), tensor({14.0 / 9.0, 50.0 / 9.0}, {}, kFloat64), 1e-12));
  CHECK(std::abs(x.var(false).item<double>() - 29.5 / 6.0) < 1e-12);
}

TEST_CASE("one integer dim reduces that dim (not var(bool unbiased)), as PyTorch's x.var(0)") {
  // Before, x.var(0) and var(x, 1) bound to var(bool unbiased): the variance of every element.
  const Tensor x = arange(6.0, kFloat64).reshape({2, 3});
  CHECK(x.var(0).to_vector<double>() == std::vector<double>{4.5, 4.5, 4.5});
  CHECK(x.var(1).to_vector<double>() == std::vector<double>{1.0, 1.0});
  CHECK(x.var(-1).to_vector<double>() == std::vector<double>{1.0, 1.0});
  CHECK(var(x, 1).to_vector<double>() == std::vector<double>{1.0, 1.0});
  CHECK(allclose(var(x, 1, false), tensor({2.0 / 3, 2.0 / 3}, {}, kFloat64), 1e-12));
  CHECK(x.var(0, false).to_vector<double>() == std::vector<double>{2.25, 2.25, 2.25});
  CHECK(x.var(0, true, true).shape() == Shape{1, 3});
  const int64_t d64 = 0;
  const unsigned du = 1;
  CHECK(x.var(d64).shape() == Shape{3});
  CHECK(var(x, du).shape() == Shape{2});
  // bool still means unbiased, over every element.
  CHECK(x.var(true).item<double>() == 3.5);
  CHECK(std::abs(x.var(false).item<double>() - 35.0 / 12) < 1e-12);
  CHECK(var(x, false).dim() == 0);
  // The other reductions take one int as well (libtorch's IntArrayRef does).
  CHECK(x.sum(1).to_vector<double>() == std::vector<double>{3, 12});
  CHECK(sum(x, 0).to_vector<double>() == std::vector<double>{3, 5, 7});
  CHECK(x.mean(0, true).to_vector<double>() == std::vector<double>{1.5, 2.5, 3.5});
  CHECK(x.mean(0, true).shape() == Shape{1, 3});
  CHECK(mean(x, -1).to_vector<double>() == std::vector<double>{1, 4});
  CHECK(amax(x, 1).to_vector<double>() == std::vector<double>{2, 5});
  CHECK(amin(x, 0).to_vector<double>() == std::vector<double>{0, 1, 2});
  CHECK(amax(x, {}).dim() == 0);  // {} is still "every dim"
  CHECK(x.sum({}).dim() == 0);
  CHECK_THROWS_CONTAINS(x.var(2), "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
}

TEST_CASE("autograd metadata") {
  Tensor x = ones({2, 3}).requires_grad_(true);
  CHECK(x.sum().grad_fn()->name() == "SumBackward");
  CHECK(x.mean({0}).grad_fn()->name() == "MeanBackward");
  CHECK(x.var({1}).grad_fn()->name() == "VarBackward");
  CHECK(x.max().grad_fn()->name() == "MaxBackward");
  auto m = min(x, 1);
  CHECK(m.values.grad_fn()->name() == "MinBackward");
  CHECK(!m.indices.requires_grad());
  CHECK(!x.argmax().requires_grad());
  Tensor xs = x.sum();
  {
    NoGradGuard g;
    CHECK(!x.sum().requires_grad());
  }
  CHECK(xs.requires_grad());
}

TEST_CASE("reduction errors") {
  Tensor x = zeros({3, 4});
  CHECK_THROWS_CONTAINS(x.sum({1, 1}), "dim 1 appears multiple times in the list of dims");
  CHECK_THROWS_CONTAINS(x.sum({1, -1}), "dim 1 appears multiple times in the list of dims");
  CHECK_THROWS_CONTAINS(x.mean({0, -2}), "dim 0 appears multiple times in the list of dims");
  CHECK_THROWS_CONTAINS(x.sum({2}), "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  CHECK_THROWS_CONTAINS(x.var({-3}), "Dimension out of range (expected to be in range of [-2, 1], but got -3)");
  CHECK_THROWS_CONTAINS(max(x, 2), "Dimension out of range");
  CHECK_THROWS_CONTAINS(x.argmax(5), "Dimension out of range");
  CHECK_THROWS_CONTAINS(scalar_tensor(1.0).sum({1}), "expected to be in range of [-1, 0], but got 1");
  CHECK_THROWS_CONTAINS(zeros({0}).max(),
                        "max(): Expected reduction dim to be specified for input.numel() == 0.");
  CHECK_THROWS_CONTAINS(zeros({0}).min(),
                        "min(): Expected reduction dim to be specified for input.numel() == 0.");
  CHECK_THROWS_CONTAINS(zeros({0}).argmax(),
                        "argmax(): Expected reduction dim to be specified for input.numel() == 0.");
  CHECK_THROWS_CONTAINS(max(zeros({2, 0}), 1), "max(): Expected reduction dim 1 to have non-zero size.");
  CHECK_THROWS_CONTAINS(zeros({2, 0}).argmax(1), "argmax(): Expected reduction dim 1 to have non-zero size.");
  Tensor l = zeros({3}, kInt64);
  CHECK_THROWS_CONTAINS(l.mean(), "mean(): could not infer output dtype. Input dtype must be either a floating "
                                  "point or complex dtype. Got: Long");
  CHECK_THROWS_CONTAINS(zeros({3}, kUInt8).mean({0}), "complex dtype. Got: Byte");
  CHECK_THROWS_CONTAINS(l.var(), "std and var only support floating point");
  CHECK_THROWS_CONTAINS(sum(Tensor()), "sum: expected a defined tensor");
  CHECK_THROWS_CONTAINS(max(Tensor(), 0), "max: expected a defined tensor");
}
