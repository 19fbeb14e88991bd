// nn::init: gains and fans as PyTorch, statistics of each fill, in-place and
// history-free fills, reproducibility, and the error messages.
#include <cmath>

#include "tests/test_util.h"

using namespace minidl;
namespace init = minidl::nn::init;

namespace {
struct Stats {
  double min = 0, max = 0, mean = 0, std = 0;
};
Stats stats_of(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Stats s{v[0], v[0], 0, 0};
  for (double x : v) {
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
    s.mean += x;
  }
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size()));
  return s;
}
}  // namespace

TEST_CASE("calculate_gain matches PyTorch") {
  CHECK(init::calculate_gain("linear") == 1.0);
  CHECK(init::calculate_gain("conv2d") == 1.0);
  CHECK(init::calculate_gain("sigmoid") == 1.0);
  CHECK(init::calculate_gain("tanh") == doctest::Approx(5.0 / 3.0));
  CHECK(init::calculate_gain("relu") == doctest::Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain("leaky_relu") == doctest::Approx(std::sqrt(2.0 / (1 + 0.01 * 0.01))));
  CHECK(init::calculate_gain("leaky_relu", std::sqrt(5.0)) == doctest::Approx(std::sqrt(1.0 / 3.0)));
  CHECK(init::calculate_gain("selu") == 0.75);
  CHECK_THROWS_CONTAINS(init::calculate_gain("swish"), "Unsupported nonlinearity swish");
}

TEST_CASE("fan in and fan out as _calculate_fan_in_and_fan_out") {
  CHECK(init::calculate_fan_in_and_fan_out(empty({64, 8, 3, 5})) == std::pair<int64_t, int64_t>{120, 960});
  CHECK(init::calculate_fan_in_and_fan_out(empty({10, 4})) == std::pair<int64_t, int64_t>{4, 10});
  CHECK_THROWS_CONTAINS(init::calculate_fan_in_and_fan_out(empty({10})),
                        "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions");
  CHECK_THROWS_CONTAINS(init::kaiming_uniform_(empty({10})), "fewer than 2 dimensions");
  CHECK_THROWS_CONTAINS(init::xavier_normal_(empty({})), "fewer than 2 dimensions");
}

TEST_CASE("kaiming_uniform_ and kaiming_normal_ statistics") {
  manual_seed(20);
  Tensor w = empty({256, 64, 3, 3});  // fan_in 576, fan_out 2304
  const double std_in = std::sqrt(2.0) / std::sqrt(576.0);
  Tensor same = init::kaiming_uniform_(w, 0.0, "fan_in", "relu");
  CHECK(same.is_same(w));
  Stats s = stats_of(w);
  const double bound = std::sqrt(3.0) * std_in;
  CHECK(s.min >= -bound);
  CHECK(s.max < bound);
  CHECK(s.max > 0.999 * bound);
  CHECK(std::abs(s.mean) < 0.01 * bound);
  CHECK(s.std == doctest::Approx(std_in).epsilon(0.01));

  init::kaiming_normal_(w, 0.0, "fan_out", "relu");
  s = stats_of(w);
  CHECK(std::abs(s.mean) < 0.01 * std_in);
  CHECK(s.std == doctest::Approx(std::sqrt(2.0 / 2304.0)).epsilon(0.01));

  // Default a=0 with leaky_relu, as PyTorch.
  init::kaiming_normal_(w);
  CHECK(stats_of(w).std == doctest::Approx(std::sqrt(2.0 / (1 + 1e-4)) / std::sqrt(576.0)).epsilon(0.01));
  CHECK_THROWS_CONTAINS(init::kaiming_normal_(w, 0.0, "fan_avg"),
                        "Mode fan_avg not supported, please use one of ['fan_in', 'fan_out']");
}

TEST_CASE("xavier_uniform_ and xavier_normal_ statistics") {
  manual_seed(21);
  Tensor w = empty({300, 200}, kFloat64);
  const double std = 2.0 * std::sqrt(2.0 / 500.0);
  init::xavier_uniform_(w, 2.0);
  Stats s = stats_of(w);
  CHECK(s.max < std::sqrt(3.0) * std);
  CHECK(s.min >= -std::sqrt(3.0) * std);
  CHECK(s.std == doctest::Approx(std).epsilon(0.01));
  init::xavier_normal_(w);
  CHECK(stats_of(w).std == doctest::Approx(std::sqrt(2.0 / 500.0)).epsilon(0.01));
}

TEST_CASE("uniform_, normal_, constant_, zeros_, ones_") {
  manual_seed(22);
  Tensor t = empty({100, 100});
  init::uniform_(t, -2.0, 3.0);
  Stats s = stats_of(t);
  CHECK(s.min >= -2.0);
  CHECK(s.max < 3.0);
  CHECK(s.mean == doctest::Approx(0.5).epsilon(0.05));
  CHECK(s.std == doctest::Approx(5.0 / std::sqrt(12.0)).epsilon(0.02));
  init::normal_(t, 1.5, 0.5);
  s = stats_of(t);
  CHECK(s.mean == doctest::Approx(1.5).epsilon(0.01));
  CHECK(s.std == doctest::Approx(0.5).epsilon(0.02));
  init::constant_(t, 0.3);
  CHECK(t.to_vector<float>() == std::vector<float>(10000, 0.3f));
  init::zeros_(t);
  CHECK(t.abs().sum().item() == 0.0);
  init::ones_(t);
  CHECK(t.sum().item() == 10000.0);
  // constant_ works on integer tensors too; random fills refuse them.
  Tensor counts = empty({3}, kInt64);
  init::constant_(counts, 4);
  CHECK(counts.to_vector<int64_t>() == std::vector<int64_t>{4, 4, 4});
  CHECK_THROWS_CONTAINS(init::uniform_(counts), "expected a floating point tensor, got");
  CHECK_THROWS_CONTAINS(init::normal_(t, 0.0, -1.0), "normal expects std >= 0.0");
  CHECK_THROWS_CONTAINS(init::uniform_(t, 1.0, 0.0), "uniform_ expects to return a [from, to) range");
  CHECK_THROWS_CONTAINS(init::zeros_(Tensor()), "expected a defined tensor");
}

TEST_CASE("fills are in place, record no history, reach strided views, and follow the seed") {
  Tensor p = zeros({4, 6}).requires_grad_();
  init::normal_(p);  // grad mode is on; a parameter that needs grad may still be filled
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());
  CHECK(p.abs().sum().item() > 0.0);

  Tensor base = zeros({4, 6});
  Tensor col = base.narrow(1, 2, 1);  // a strided view
  init::ones_(col);
  CHECK(base.sum().item() == 4.0);
  CHECK(base.narrow(1, 2, 1).sum().item() == 4.0);

  manual_seed(23);
  Tensor a = init::kaiming_uniform_(empty({5, 7}));
  manual_seed(23);
  Tensor b = init::kaiming_uniform_(empty({5, 7}));
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  init::kaiming_uniform_(empty({0, 7}));  // zero elements: a no-op, as PyTorch
}
