// nn layers: parameter shapes, PyTorch's default init (bounds of the uniform
// draws), forward equal to the functional op, Dropout in train/eval,
// Sequential/ModuleList, option errors, and a tiny MLP that learns.
#include <algorithm>
#include <cmath>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
namespace F = minidl::nn::functional;

namespace {

// max |v|, mean and variance of a tensor's values.
struct Stats {
  double max_abs = 0, mean = 0, var = 0;
};
Stats stats_of(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Stats s;
  for (double x : v) {
    s.max_abs = std::max(s.max_abs, std::abs(x));
    s.mean += x;
  }
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.var += (x - s.mean) * (x - s.mean);
  s.var /= static_cast<double>(v.size());
  return s;
}

// Values drawn from U(-bound, bound): all inside, the extremes near the bound,
// mean ~ 0 and variance ~ bound^2 / 3.
void check_uniform(const Tensor& t, double bound) {
  Stats s = stats_of(t);
  const double n = static_cast<double>(t.numel());
  CHECK(s.max_abs <= bound);
  CHECK(s.max_abs > bound * (1.0 - 20.0 / n));
  CHECK(std::abs(s.mean) < 4.0 * bound / std::sqrt(3.0 * n));
  CHECK(s.var == doctest::Approx(bound * bound / 3.0).epsilon(0.08));
}

}  // namespace

TEST_CASE("Linear: shapes, default init, forward equals linear()") {
  manual_seed(10);
  nn::Linear fc(50, 200);
  CHECK(fc->weight.shape() == Shape{200, 50});
  CHECK(fc->bias.shape() == Shape{200});
  CHECK(fc->weight.requires_grad());
  CHECK(fc->name() == "Linear");
  // kaiming_uniform_(a=sqrt(5)): gain sqrt(2/6), bound = sqrt(3) gain / sqrt(fan_in) = 1/sqrt(fan_in).
  check_uniform(fc->weight, 1.0 / std::sqrt(50.0));
  Stats b = stats_of(fc->bias);
  CHECK(b.max_abs <= 1.0 / std::sqrt(50.0));
  CHECK(b.max_abs > 0.8 / std::sqrt(50.0));

  Tensor x = randn({7, 50});
  Tensor y = fc(x);
  CHECK(y.shape() == Shape{7, 200});
  CHECK(allclose(y, linear(x, fc->weight, fc->bias), 0, 0));
  CHECK(fc(randn({2, 3, 50})).shape() == Shape{2, 3, 200});

  nn::Linear nobias(nn::LinearOptions(4, 3).bias(false));
  CHECK_FALSE(nobias->bias.defined());
  CHECK(nobias->parameters().size() == 1);
  Tensor x2 = randn({5, 4});
  CHECK(allclose(nobias(x2), x2.matmul(nobias->weight.t()), 1e-6, 1e-6));
  CHECK_THROWS_CONTAINS(nn::Linear(-1, 3), "expected non-negative in_features");

  // The same seed gives the same weights.
  manual_seed(11);
  nn::Linear a(6, 5);
  manual_seed(11);
  nn::Linear c(6, 5);
  CHECK(a->weight.to_vector<float>() == c->weight.to_vector<float>());
  CHECK(a->bias.to_vector<float>() == c->bias.to_vector<float>());
}

TEST_CASE("Conv2d: shapes, default init, forward equals conv2d(), option errors") {
  manual_seed(12);
  nn::Conv2d conv(nn::Conv2dOptions(8, 64, 3).padding(1));
  CHECK(conv->weight.shape() == Shape{64, 8, 3, 3});
  CHECK(conv->bias.shape() == Shape{64});
  const double bound = 1.0 / std::sqrt(8.0 * 9.0);
  check_uniform(conv->weight, bound);
  CHECK(stats_of(conv->bias).max_abs <= bound);

  Tensor x = randn({2, 8, 5, 6});
  Tensor y = conv(x);
  CHECK(y.shape() == Shape{2, 64, 5, 6});
  Conv2dParams p;
  p.padding = {1, 1};
  CHECK(allclose(y, conv2d(x, conv->weight, conv->bias, p), 0, 0));

  nn::Conv2d g(nn::Conv2dOptions(4, 6, {3, 1}).stride({2, 1}).padding({0, 1}).dilation(2).groups(2).bias(false));
  CHECK(g->weight.shape() == Shape{6, 2, 3, 1});
  CHECK_FALSE(g->bias.defined());
  check_uniform(g->weight, 1.0 / std::sqrt(2.0 * 3.0));  // fan_in = in/groups * kH * kW
  Tensor x2 = randn({1, 4, 9, 5});
  Conv2dParams p2;
  p2.stride = {2, 1};
  p2.padding = {0, 1};
  p2.dilation = {2, 2};
  p2.groups = 2;
  CHECK(allclose(g(x2), F::conv2d(x2, g->weight, Tensor(), p2), 0, 0));
  CHECK(nn::Conv2d(3, 4, 2)(randn({3, 5, 5})).shape() == Shape{4, 4, 4});  // unbatched

  CHECK_THROWS_CONTAINS(nn::Conv2d(nn::Conv2dOptions(3, 6, 3).groups(2)), "in_channels must be divisible by groups");
  CHECK_THROWS_CONTAINS(nn::Conv2d(nn::Conv2dOptions(4, 6, 3).groups(4)), "out_channels must be divisible by groups");
  CHECK_THROWS_CONTAINS(nn::Conv2d(nn::Conv2dOptions(4, 6, 3).groups(0)), "groups must be a positive integer");
  CHECK_THROWS_CONTAINS(nn::Conv2d(nn::Conv2dOptions(4, 6, 3).stride(0)), "non-positive stride is not supported");
  CHECK_THROWS_CONTAINS(nn::Conv2d(nn::Conv2dOptions(4, 6, 3).padding(-1)), "negative padding is not supported");
  CHECK_THROWS_CONTAINS(conv(randn({2, 3})), "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [2, 3]");
}

TEST_CASE("activations, pools and Flatten equal their functional ops") {
  manual_seed(13);
  Tensor x = randn({2, 3, 6, 5});
  CHECK(allclose(nn::ReLU()(x), F::relu(x), 0, 0));
  CHECK(allclose(nn::LeakyReLU(0.2)(x), F::leaky_relu(x, 0.2), 0, 0));
  CHECK(allclose(nn::LeakyReLU()(x), F::leaky_relu(x, 0.01), 0, 0));
  CHECK(allclose(nn::GELU()(x), F::gelu(x), 0, 0));
  CHECK(allclose(nn::GELU(nn::GELUOptions().approximate("tanh"))(x), F::gelu(x, "tanh"), 0, 0));
  CHECK_THROWS_CONTAINS(nn::GELU(nn::GELUOptions().approximate("erf")), "approximate argument must be either none or tanh");
  CHECK(allclose(nn::Sigmoid()(x), F::sigmoid(x), 0, 0));
  CHECK(allclose(nn::Tanh()(x), F::tanh(x), 0, 0));
  CHECK(nn::Identity()(x).is_same(x));

  CHECK(allclose(nn::MaxPool2d(2)(x), max_pool2d(x, {2, 2}, {2, 2}), 0, 0));
  CHECK(allclose(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(1).padding(1))(x), F::max_pool2d(x, 3, 1, 1), 0, 0));
  CHECK(allclose(nn::AvgPool2d(nn::AvgPool2dOptions({2, 3}).padding({1, 1}).count_include_pad(false))(x),
                 avg_pool2d(x, {2, 3}, {2, 3}, {1, 1}, false, false), 0, 0));
  CHECK(allclose(nn::AdaptiveAvgPool2d(1)(x), x.mean({2, 3}, true), 1e-6, 1e-6));
  CHECK(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({2, 3}))(x).shape() == Shape{2, 3, 2, 3});
  CHECK_THROWS_CONTAINS(nn::MaxPool2d(nn::MaxPool2dOptions(2).padding(2)),
                        "pad should be at most half of effective kernel size");
  CHECK_THROWS_CONTAINS(nn::AvgPool2d(0), "kernel_size must be greater than zero");

  CHECK(allclose(F::max_pool2d(x, 2), max_pool2d(x, {2, 2}), 0, 0));
  CHECK(allclose(F::avg_pool2d(x, {2, 1}, 1), avg_pool2d(x, {2, 1}, {1, 1}), 0, 0));
  CHECK(allclose(F::adaptive_avg_pool2d(x, 2), adaptive_avg_pool2d(x, {2, 2}), 0, 0));
  CHECK(nn::Flatten()(x).shape() == Shape{2, 90});
  CHECK(nn::Flatten(nn::FlattenOptions().start_dim(0).end_dim(1))(x).shape() == Shape{6, 6, 5});
}

TEST_CASE("Dropout: zeroes and rescales in training, identity in eval") {
  manual_seed(14);
  nn::Dropout drop(0.25);
  Tensor x = ones({4000});
  std::vector<float> y = drop(x).to_vector<float>();
  size_t zeros_seen = 0;
  for (float v : y) {
    if (v == 0.0f) ++zeros_seen;
    else CHECK(v == doctest::Approx(1.0 / 0.75));
  }
  CHECK(zeros_seen > 850);   // expected 1000, sd ~ 27
  CHECK(zeros_seen < 1150);
  drop->eval();
  CHECK(allclose(drop(x), x, 0, 0));
  nn::Sequential seq(nn::Linear(3, 3), nn::Dropout(0.9));
  seq->eval();  // reaches the Dropout inside
  Tensor z = randn({5, 3});
  CHECK(allclose(seq(z), seq[0]->forward(z), 0, 0));
  CHECK_THROWS_CONTAINS(nn::Dropout(1.5), "dropout probability has to be between 0 and 1, but got 1.5");
}

TEST_CASE("Sequential chains children; indexing; ModuleList holds modules") {
  manual_seed(15);
  nn::Linear l1(4, 8), l2(8, 2);
  nn::Sequential seq(l1, nn::ReLU(), l2);
  Tensor x = randn({3, 4});
  CHECK(allclose(seq(x), l2(relu(l1(x))), 0, 0));
  CHECK(seq->size() == 3);
  CHECK(seq[0].get() == l1.get());
  CHECK(seq[-1].get() == l2.get());
  CHECK(&seq->at<nn::LinearImpl>(2) == l2.get());
  CHECK_THROWS_CONTAINS(seq[3], "index 3 is out of range");
  CHECK_THROWS_CONTAINS(seq->at<nn::Conv2dImpl>(0), "is a Linear, not the requested type");
  seq->push_back(nn::Sigmoid());
  seq->push_back(std::make_shared<nn::TanhImpl>());
  CHECK(seq->size() == 5);
  CHECK(seq->named_children()[4].first == "4");
  CHECK(allclose(seq(x), tanh(sigmoid(l2(relu(l1(x))))), 0, 0));
  nn::Sequential empty;
  CHECK(empty->is_empty());
  CHECK(empty(x).is_same(x));

  // Nested Sequentials get nested names.
  nn::Sequential outer(nn::Sequential(nn::Linear(2, 2), nn::ReLU()), nn::Linear(2, 1));
  std::vector<std::string> names;
  for (const auto& [name, p] : outer->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.0.weight", "0.0.bias", "1.weight", "1.bias"});

  nn::ModuleList list;
  list->push_back(nn::Linear(2, 3));
  list->push_back(nn::Linear(3, 4));
  CHECK(list->size() == 2);
  std::vector<std::string> kinds;
  Tensor h = randn({1, 2});
  for (const auto& m : *list) {
    kinds.push_back(m->name());
    h = m->forward(h);
  }
  CHECK(kinds == std::vector<std::string>{"Linear", "Linear"});
  CHECK(h.shape() == Shape{1, 4});
  CHECK(list->parameters().size() == 4);
}

TEST_CASE("a tiny MLP trained with manual SGD reduces the loss on a fixed toy problem") {
  manual_seed(16);
  // Two interleaved classes on the plane: label = (x0 * x1 > 0), which a linear model cannot fit.
  const int64_t n = 128;
  Tensor x = randn({n, 2});
  std::vector<float> xs = x.to_vector<float>();
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = xs[2 * i] * xs[2 * i + 1] > 0 ? 1 : 0;
  Tensor target = tensor(labels, {n});

  nn::Sequential mlp(nn::Linear(2, 32), nn::Tanh(), nn::Linear(32, 32), nn::ReLU(), nn::Linear(32, 2));
  auto params = mlp->parameters();
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    mlp->zero_grad();
    Tensor loss = F::cross_entropy(mlp(x), target);
    loss.backward();
    if (step == 0) first = loss.item();
    last = loss.item();
    NoGradGuard no_grad;
    for (Tensor& p : params) p.add_(p.grad(), -0.5);
  }
  MESSAGE("MLP loss: ", first, " -> ", last);
  CHECK(first > 0.6);
  CHECK(last < 0.5 * first);
  Tensor pred = mlp(x).argmax(1, false);
  const std::vector<int64_t> p = pred.to_vector<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) correct += p[static_cast<size_t>(i)] == labels[static_cast<size_t>(i)];
  CHECK(correct > n * 85 / 100);
}
