// Normalization modules: BatchNorm1d/2d/3d, InstanceNorm1d/2d/3d, LayerNorm,
// GroupNorm. Defaults, parameters/buffers/state_dict names, train vs eval,
// momentum=None (cumulative average), track_running_stats, affine=False,
// printing, dimension errors, the InstanceNorm momentum warning.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "minidl/nn/modules/batch_norm.h"
#include "minidl/nn/modules/group_norm.h"
#include "minidl/nn/modules/instance_norm.h"
#include "minidl/nn/modules/layer_norm.h"
#include "minidl/ops/batch_norm.h"
#include "minidl/ops/instance_norm.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::max_abs_diff;

namespace {

std::vector<std::string> names(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

template <class M>
std::string repr(const M& module) {
  std::ostringstream os;
  os << *module;
  return os.str();
}

// Per-channel mean and unbiased variance of an (N, C, *) float64 tensor, by loops.
void channel_stats(const Tensor& x, std::vector<double>& mean, std::vector<double>& unbiased) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  const std::vector<double> v = x.to_vector<double>();
  mean.assign(C, 0.0);
  unbiased.assign(C, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) mean[c] += v[(n * C + c) * S + s];
    mean[c] /= static_cast<double>(N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const double d = v[(n * C + c) * S + s] - mean[c];
        unbiased[c] += d * d;
      }
    unbiased[c] /= static_cast<double>(N * S - 1);
  }
}

// Captures what is written to std::cerr while alive.
struct CaptureStderr {
  std::ostringstream out;
  std::streambuf* old = std::cerr.rdbuf(out.rdbuf());
  ~CaptureStderr() { std::cerr.rdbuf(old); }
};

size_t count_of(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t pos = text.find(word); pos != std::string::npos; pos = text.find(word, pos + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("BatchNorm2d defaults: options, parameters, buffers and state_dict names") {
  nn::BatchNorm2d bn(5);
  CHECK(bn->options.num_features() == 5);
  CHECK(bn->options.eps() == 1e-5);
  CHECK(bn->options.momentum() == 0.1);
  CHECK(bn->options.affine());
  CHECK(bn->options.track_running_stats());
  CHECK(bn->weight.to_vector<double>() == std::vector<double>(5, 1.0));
  CHECK(bn->bias.to_vector<double>() == std::vector<double>(5, 0.0));
  CHECK(bn->weight.requires_grad());
  CHECK(bn->running_mean.to_vector<double>() == std::vector<double>(5, 0.0));
  CHECK(bn->running_var.to_vector<double>() == std::vector<double>(5, 1.0));
  CHECK(bn->num_batches_tracked.dtype() == kInt64);
  CHECK(bn->num_batches_tracked.dim() == 0);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 0);
  CHECK(names(bn->named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(names(bn->named_buffers()) == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  CHECK(names(bn->state_dict()) ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn->is_training());
}

TEST_CASE("BatchNorm loads checkpoints without num_batches_tracked (pre-0.4.1 PyTorch), nothing else optional") {
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(3, 4, 3)), nn::BatchNorm2d(4));
  auto* bn = net->children()[1].get();
  Tensor tracked = bn->named_buffers()[2].second;
  Tensor(tracked).fill_(7);
  nn::NamedTensors old;
  for (auto& [name, t] : net->state_dict())
    if (name != "1.num_batches_tracked") old.emplace_back(name, t.clone() + (t.dtype() == kInt64 ? 0.0 : 1.0));
  auto result = net->load_state_dict(old);  // strict: no "Missing key(s)" for the counter
  CHECK(result.missing_keys.empty());
  CHECK(tracked.item<int64_t>() == 7);  // kept, as PyTorch keeps the module's value
  CHECK(bn->named_buffers()[0].second.to_vector<double>() == std::vector<double>(4, 1.0));  // running_mean loaded
  old.erase(std::remove_if(old.begin(), old.end(), [](auto& kv) { return kv.first == "1.running_var"; }), old.end());
  CHECK_THROWS_CONTAINS(net->load_state_dict(old), "Missing key(s) in state_dict: \"1.running_var\"");
}

TEST_CASE("pretty_print matches PyTorch's repr") {
  // PyTorch 2.15 prints bias= (whether there is one: affine=False prints bias=False).
  CHECK(repr(nn::BatchNorm2d(64)) ==
        "BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)");
  CHECK(repr(nn::BatchNorm2d(nn::BatchNormOptions(64).momentum(std::nullopt))) ==
        "BatchNorm2d(64, eps=1e-05, momentum=None, affine=True, bias=True, track_running_stats=True)");
  CHECK(repr(nn::BatchNorm1d(3, 1e-3, 0.1, false, false)) ==
        "BatchNorm1d(3, eps=0.001, momentum=0.1, affine=False, bias=False, track_running_stats=False)");
  CHECK(repr(nn::BatchNorm3d(8)) ==
        "BatchNorm3d(8, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)");
  CHECK(repr(nn::BatchNorm2d(nn::BatchNormOptions(4).bias(false))) ==
        "BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, bias=False, track_running_stats=True)");
  CHECK(repr(nn::InstanceNorm2d(64)) ==
        "InstanceNorm2d(64, eps=1e-05, momentum=0.1, affine=False, bias=False, track_running_stats=False)");
  CHECK(repr(nn::InstanceNorm3d(nn::InstanceNormOptions(4).affine(true))) ==
        "InstanceNorm3d(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=False)");
  CHECK(repr(nn::InstanceNorm2d(nn::InstanceNormOptions(4).affine(true).bias(false))) ==
        "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=True, bias=False, track_running_stats=False)");
  CHECK(repr(nn::LayerNorm(Shape{10})) == "LayerNorm((10,), eps=1e-05, elementwise_affine=True, bias=True)");
  CHECK(repr(nn::LayerNorm(nn::LayerNormOptions({64, 32, 32}).bias(false))) ==
        "LayerNorm((64, 32, 32), eps=1e-05, elementwise_affine=True, bias=False)");
  CHECK(repr(nn::GroupNorm(32, 64)) == "GroupNorm(32, 64, eps=1e-05, affine=True, bias=True)");
  CHECK(repr(nn::GroupNorm(2, 6, 1e-5, false)) == "GroupNorm(2, 6, eps=1e-05, affine=False, bias=False)");
  CHECK(repr(nn::GroupNorm(nn::GroupNormOptions(2, 4).bias(false))) ==
        "GroupNorm(2, 4, eps=1e-05, affine=True, bias=False)");
}

TEST_CASE("BatchNorm: training uses batch stats and updates the buffers; eval uses the buffers") {
  manual_seed(1);
  nn::BatchNorm2d bn(3);
  bn->to(kFloat64);
  CHECK(bn->num_batches_tracked.dtype() == kInt64);
  const Tensor x = randn({4, 3, 5, 2}, kFloat64) * 2.0 + 1.0;
  std::vector<double> mean, unbiased;
  channel_stats(x, mean, unbiased);

  const Tensor y = bn(x);
  CHECK(allclose(y, batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true), 1e-12, 1e-12));
  CHECK(bn->num_batches_tracked.item<int64_t>() == 1);
  std::vector<double> em(3), ev(3);
  for (int c = 0; c < 3; ++c) em[c] = 0.1 * mean[c], ev[c] = 0.9 + 0.1 * unbiased[c];
  CHECK(allclose(bn->running_mean, tensor(em, {3}, kFloat64), 1e-12, 1e-14));
  CHECK(allclose(bn->running_var, tensor(ev, {3}, kFloat64), 1e-12, 1e-14));

  bn->eval();
  const Tensor rm = bn->running_mean.clone(), rv = bn->running_var.clone();
  const Tensor z = bn(x);
  CHECK(allclose(z, batch_norm(x, rm, rv, Tensor(), Tensor(), false), 1e-12, 1e-12));
  CHECK(max_abs_diff(bn->running_mean, rm) == 0.0);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 1);
  // eval with one value per channel is fine (running stats are used)
  CHECK(bn(randn({1, 3, 1, 1}, kFloat64)).shape() == Shape{1, 3, 1, 1});

  // gradients reach the affine parameters
  bn->train();
  bn(x).sum().backward();
  CHECK(bn->weight.grad().defined());
  CHECK(bn->bias.grad().defined());
}

TEST_CASE("BatchNorm momentum=None is a cumulative average over the batches (hand-checked over 3 batches)") {
  manual_seed(2);
  nn::BatchNorm1d bn(nn::BatchNormOptions(2).momentum(std::nullopt));
  bn->to(kFloat64);
  std::vector<double> sum_mean(2, 0.0), sum_var(2, 0.0);
  for (int k = 1; k <= 3; ++k) {
    const Tensor x = randn({3 + k, 2, 4}, kFloat64) * static_cast<double>(k) + static_cast<double>(2 * k);
    (void)bn(x);
    std::vector<double> mean, unbiased;
    channel_stats(x, mean, unbiased);
    for (int c = 0; c < 2; ++c) sum_mean[c] += mean[c], sum_var[c] += unbiased[c];
  }
  CHECK(bn->num_batches_tracked.item<int64_t>() == 3);
  const std::vector<double> rm = bn->running_mean.to_vector<double>(), rv = bn->running_var.to_vector<double>();
  for (int c = 0; c < 2; ++c) {
    CHECK(rm[c] == doctest::Approx(sum_mean[c] / 3).epsilon(1e-12));
    CHECK(rv[c] == doctest::Approx(sum_var[c] / 3).epsilon(1e-12));
  }
}

TEST_CASE("BatchNorm track_running_stats=False: no buffers, batch statistics in eval too") {
  manual_seed(3);
  nn::BatchNorm2d bn(nn::BatchNormOptions(3).track_running_stats(false));
  CHECK_FALSE(bn->running_mean.defined());
  CHECK_FALSE(bn->num_batches_tracked.defined());
  CHECK(bn->buffers().empty());
  CHECK(names(bn->state_dict()) == std::vector<std::string>{"weight", "bias"});
  const Tensor x = randn({4, 3, 2, 2});
  const Tensor y_train = bn(x);
  bn->eval();
  CHECK(allclose(bn(x), y_train, 0, 0));
  // ... so eval with one value per channel still raises the batch-size error
  CHECK_THROWS_CONTAINS(bn(randn({1, 3, 1, 1})), "Expected more than 1 value per channel when training");
}

TEST_CASE("BatchNorm: switching track_running_stats off after construction stops updates, eval still uses them") {
  manual_seed(4);
  nn::BatchNorm1d bn(3);
  (void)bn(randn({5, 3}) + 2.0);
  const Tensor rm = bn->running_mean.clone(), rv = bn->running_var.clone();
  bn->options.track_running_stats(false);
  const Tensor x = randn({5, 3});
  CHECK(allclose(bn(x), batch_norm(x, Tensor(), Tensor(), bn->weight, bn->bias, true), 1e-6, 1e-6));
  CHECK(max_abs_diff(bn->running_mean, rm) == 0.0);
  CHECK(max_abs_diff(bn->running_var, rv) == 0.0);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 1);
  bn->eval();
  CHECK(allclose(bn(x), batch_norm(x, rm, rv, bn->weight, bn->bias, false), 1e-6, 1e-6));
}

TEST_CASE("BatchNorm affine=False has no parameters; reset_running_stats and reset_parameters") {
  nn::BatchNorm2d bn(nn::BatchNormOptions(4).affine(false));
  CHECK(bn->parameters().empty());
  CHECK_FALSE(bn->weight.defined());
  CHECK(names(bn->state_dict()) == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  (void)bn(randn({2, 4, 3, 3}) + 5.0);
  CHECK(bn->running_mean.to_vector<double>() != std::vector<double>(4, 0.0));
  bn->reset_running_stats();
  CHECK(bn->running_mean.to_vector<double>() == std::vector<double>(4, 0.0));
  CHECK(bn->running_var.to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(bn->num_batches_tracked.item<int64_t>() == 0);

  nn::BatchNorm1d affine(2);
  {
    NoGradGuard no_grad;
    affine->weight.fill_(3.0);
    affine->bias.fill_(4.0);
  }
  affine->reset_parameters();
  CHECK(affine->weight.to_vector<double>() == std::vector<double>{1.0, 1.0});
  CHECK(affine->bias.to_vector<double>() == std::vector<double>{0.0, 0.0});
}

TEST_CASE("BatchNorm dimension errors use PyTorch's wording") {
  CHECK_THROWS_CONTAINS(nn::BatchNorm2d(3)(randn({2, 3, 4})), "expected 4D input (got 3D input)");
  CHECK_THROWS_CONTAINS(nn::BatchNorm1d(3)(randn({2, 3, 4, 4})), "expected 2D or 3D input (got 4D input)");
  CHECK_THROWS_CONTAINS(nn::BatchNorm3d(3)(randn({2, 3, 4, 4})), "expected 5D input (got 4D input)");
  CHECK_THROWS_CONTAINS(nn::BatchNorm2d(4)(randn({2, 3, 4, 4})), "running_mean should contain 3 elements not 4");
  nn::BatchNorm2d bn(3);
  CHECK_THROWS_CONTAINS(bn(randn({2, 3, 4})), "expected 4D input (got 3D input)");
  CHECK(bn->num_batches_tracked.item<int64_t>() == 0);  // the check runs before the counter moves
  CHECK(nn::BatchNorm1d(3)(randn({2, 3, 5})).shape() == Shape{2, 3, 5});
  CHECK(nn::BatchNorm3d(3)(randn({2, 3, 2, 2, 2})).shape() == Shape{2, 3, 2, 2, 2});
}

TEST_CASE("InstanceNorm defaults, unbatched input, tracked running stats") {
  manual_seed(5);
  nn::InstanceNorm2d in(3);
  CHECK_FALSE(in->options.affine());
  CHECK_FALSE(in->options.track_running_stats());
  CHECK(in->parameters().empty());
  CHECK(in->buffers().empty());
  const Tensor x = randn({2, 3, 4, 5});
  CHECK(allclose(in(x), instance_norm(x), 0, 0));
  // unbatched (C, H, W) is the batched result without the batch dim
  const Tensor one = randn({3, 4, 5});
  CHECK(allclose(in(one), instance_norm(one.unsqueeze(0)).squeeze(0), 0, 0));
  CHECK(nn::InstanceNorm1d(3)(randn({3, 7})).shape() == Shape{3, 7});
  CHECK(nn::InstanceNorm3d(3)(randn({3, 2, 2, 2})).shape() == Shape{3, 2, 2, 2});

  nn::InstanceNorm1d tracked(nn::InstanceNormOptions(3).affine(true).track_running_stats(true));
  tracked->to(kFloat64);
  CHECK(names(tracked->state_dict()) ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  const Tensor x1 = randn({4, 3, 6}, kFloat64) + 3.0;
  Tensor rm = zeros({3}, kFloat64), rv = ones({3}, kFloat64);
  (void)instance_norm(x1, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5);
  (void)tracked(x1);
  CHECK(allclose(tracked->running_mean, rm, 1e-12, 1e-14));
  CHECK(allclose(tracked->running_var, rv, 1e-12, 1e-14));
  tracked->eval();  // eval normalizes with the running stats
  CHECK(allclose(tracked(x1), instance_norm(x1, rm, rv, Tensor(), Tensor(), false), 1e-12, 1e-12));
  CHECK(allclose(tracked->running_mean, rm, 0, 0));
}

TEST_CASE("InstanceNorm errors and the num_features warning") {
  CHECK_THROWS_CONTAINS(nn::InstanceNorm2d(3)(randn({3, 4})), "expected 3D or 4D input (got 2D input)");
  CHECK_THROWS_CONTAINS(nn::InstanceNorm1d(3)(randn({1, 3, 4, 4})), "expected 2D or 3D input (got 4D input)");
  CHECK_THROWS_CONTAINS(nn::InstanceNorm3d(3)(randn({3, 4, 4})), "expected 4D or 5D input (got 3D input)");
  CHECK_THROWS_CONTAINS(nn::InstanceNorm2d(nn::InstanceNormOptions(4).affine(true))(randn({2, 3, 4, 4})),
                        "expected input's size at dim=1 to match num_features (4), but got: 3.");
  CaptureStderr err;
  (void)nn::InstanceNorm2d(4)(randn({2, 3, 4, 4}));  // affine=False: only a warning
  CHECK(err.out.str().find("input's size at dim=1 does not match num_features") != std::string::npos);
}

TEST_CASE("InstanceNorm momentum=None warns once that running stats will not update (PyTorch passes 0)") {
  manual_seed(6);
  nn::InstanceNorm2d in(nn::InstanceNormOptions(3).momentum(std::nullopt).track_running_stats(true));
  CaptureStderr err;
  (void)in(randn({2, 3, 4, 4}) + 5.0);
  (void)in(randn({2, 3, 4, 4}) + 5.0);
  CHECK(count_of(err.out.str(), "momentum=None does not update running_mean/running_var") == 1);
  CHECK(in->running_mean.to_vector<double>() == std::vector<double>(3, 0.0));
  CHECK(in->running_var.to_vector<double>() == std::vector<double>(3, 1.0));
  // Without running stats there is nothing to warn about.
  CaptureStderr quiet;
  (void)nn::InstanceNorm2d(nn::InstanceNormOptions(3).momentum(std::nullopt))(randn({2, 3, 4, 4}));
  CHECK(quiet.out.str().empty());
}

TEST_CASE("LayerNorm: parameters of normalized_shape, bias=False, elementwise_affine=False, same in eval") {
  manual_seed(7);
  nn::LayerNorm ln(Shape{4, 5});
  CHECK(ln->weight.shape() == Shape{4, 5});
  CHECK(ln->bias.shape() == Shape{4, 5});
  CHECK(names(ln->state_dict()) == std::vector<std::string>{"weight", "bias"});
  const Tensor x = randn({3, 4, 5});
  const Tensor y = ln(x);
  ln->eval();
  CHECK(allclose(ln(x), y, 0, 0));
  nn::LayerNorm no_bias(nn::LayerNormOptions({5}).bias(false));
  CHECK(names(no_bias->named_parameters()) == std::vector<std::string>{"weight"});
  nn::LayerNorm plain(nn::LayerNormOptions({5}).elementwise_affine(false));
  CHECK(plain->parameters().empty());
  CHECK_THROWS_CONTAINS(ln(randn({3, 5, 4})), "Given normalized_shape=[4, 5], expected input with shape [*, 4, 5]");
}

TEST_CASE("GroupNorm: per-channel affine, divisibility checked at construction") {
  manual_seed(8);
  nn::GroupNorm gn(3, 6);
  CHECK(gn->weight.shape() == Shape{6});
  CHECK(names(gn->state_dict()) == std::vector<std::string>{"weight", "bias"});
  CHECK(nn::GroupNorm(2, 6, 1e-5, false)->parameters().empty());
  const Tensor x = randn({2, 6, 3});
  const Tensor y = gn(x);
  gn->eval();
  CHECK(allclose(gn(x), y, 0, 0));
  CHECK_THROWS_CONTAINS(nn::GroupNorm(4, 6), "num_channels (6) must be divisible by num_groups (4)");  // PyTorch's
  CHECK_THROWS_CONTAINS(nn::GroupNorm(0, 6), "GroupNorm: expected a positive num_groups, got 0");
}
