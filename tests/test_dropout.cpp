// dropout: drop rate and scale on 1e5 elements, reproducibility through
// manual_seed, eval / p == 0 identity, p == 1, the gradient (mask / (1 - p))
// and a finite-difference check with a reseeded mask, error paths.
#include <cmath>
#include <limits>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::check_gradients;

namespace {

Tensor random_input(const Shape& shape, uint64_t seed, DType dtype = kFloat64) {
  manual_seed(seed);
  return randn(shape, dtype);
}

}  // namespace

TEST_CASE("dropout zeroes about p of the elements and scales the rest by 1/(1-p)") {
  const int64_t n = 100000;
  for (DType dtype : {kFloat32, kFloat64})
    for (double p : {0.1, 0.3, 0.5, 0.9}) {
      CAPTURE(p);
      const Tensor x = random_input({n}, 1, dtype);
      const Tensor y = dropout(x, p, true);
      CHECK(y.shape() == x.shape());
      CHECK(y.dtype() == dtype);
      const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
      int64_t zeros = 0;
      bool scaled = true;
      for (int64_t i = 0; i < n; ++i) {
        if (yv[i] == 0.0) {
          ++zeros;
        } else {
          const double want = xv[i] / (1.0 - p);
          scaled = scaled && std::abs(yv[i] - want) <= 1e-6 * (1 + std::abs(want));
        }
      }
      CHECK(scaled);
      // The zero count is Binomial(n, p): its standard deviation is at most 158,
      // so 1000 is over 6 sigma away.
      CHECK(std::abs(static_cast<double>(zeros) - p * n) < 1000);
    }
  // The expectation is preserved.
  const Tensor ones_in = ones({n}, kFloat64);
  double s = 0;
  for (double v : dropout(ones_in, 0.4, true).to_vector<double>()) s += v;
  CHECK(std::abs(s / n - 1.0) < 0.02);
}

TEST_CASE("dropout masks are reproducible through manual_seed") {
  const Tensor x = random_input({37, 29}, 2);
  manual_seed(7);
  const std::vector<double> a = dropout(x, 0.5).to_vector<double>();
  manual_seed(7);
  const std::vector<double> b = dropout(x, 0.5).to_vector<double>();
  CHECK(a == b);
  const std::vector<double> c = dropout(x, 0.5).to_vector<double>();  // the stream moved on
  CHECK(a != c);
  manual_seed(8);
  CHECK(dropout(x, 0.5).to_vector<double>() != a);
}

TEST_CASE("dropout is the identity in eval mode and for p == 0") {
  Tensor x = random_input({4, 5}, 3).requires_grad_();
  CHECK(dropout(x, 0.5, false).is_same(x));
  CHECK(dropout(x, 0.0, true).is_same(x));
  CHECK(dropout(x, 1.0, false).is_same(x));
  // Eval mode draws nothing from the generator.
  manual_seed(11);
  (void)dropout(x, 0.5, false);
  const double after_eval = default_generator().uniform();
  manual_seed(11);
  CHECK(default_generator().uniform() == after_eval);
}

TEST_CASE("dropout with p == 1 gives zeros and a zero gradient") {
  Tensor x = random_input({3, 4}, 4).requires_grad_();
  Tensor y = dropout(x, 1.0, true);
  for (double v : y.to_vector<double>()) CHECK(v == 0.0);
  y.backward(ones_like(y));
  for (double g : x.grad().to_vector<double>()) CHECK(g == 0.0);
}

TEST_CASE("dropout backward is grad * mask / (1 - p)") {
  const double p = 0.3;
  Tensor x = random_input({50, 41}, 5).requires_grad_();
  Tensor y = dropout(x, p, true);
  const Tensor g = random_input({50, 41}, 6);
  y.backward(g);
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  const std::vector<double> gv = g.to_vector<double>(), dx = x.grad().to_vector<double>();
  int64_t kept = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool keep = yv[i] != 0.0;  // randn values are never exactly 0
    kept += keep;
    CHECK(dx[i] == doctest::Approx(keep ? gv[i] / (1 - p) : 0.0).epsilon(1e-14));
  }
  CHECK(kept > 0);
  CHECK(kept < static_cast<int64_t>(xv.size()));
}

TEST_CASE("dropout gradient matches finite differences with a fixed mask") {
  for (double p : {0.2, 0.6}) {
    CAPTURE(p);
    // Reseed before every forward so each evaluation draws the same mask.
    check_gradients(
        [p](const std::vector<Tensor>& in) {
          manual_seed(1234);
          return dropout(in[0], p, true);
        },
        {random_input({3, 5, 7}, 7).requires_grad_()});
  }
}

TEST_CASE("dropout takes non-contiguous input") {
  const Tensor x = random_input({6, 9}, 8);
  const Tensor xt = x.transpose(0, 1);
  REQUIRE(!xt.is_contiguous());
  manual_seed(3);
  const std::vector<double> a = dropout(xt, 0.5).to_vector<double>();
  manual_seed(3);
  const std::vector<double> b = dropout(xt.contiguous(), 0.5).to_vector<double>();
  CHECK(a == b);
}

TEST_CASE("dropout errors") {
  const Tensor x = zeros({3});
  CHECK_THROWS_CONTAINS(dropout(x, 1.5), "dropout probability has to be between 0 and 1, but got 1.5");
  CHECK_THROWS_CONTAINS(dropout(x, -0.1, false), "dropout probability has to be between 0 and 1, but got -0.1");
  CHECK_THROWS_CONTAINS(dropout(x, std::numeric_limits<double>::quiet_NaN()),
                        "dropout probability has to be between 0 and 1");
  CHECK_THROWS_CONTAINS(dropout(zeros({3}, kInt64), 0.5, true), "dropout: expected a floating point tensor, got int64");
  CHECK_THROWS_CONTAINS(dropout(Tensor(), 0.5), "dropout: expected a defined tensor");
}
