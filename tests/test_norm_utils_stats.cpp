// nn/norm_utils, the running-statistics tools:
// - precise_bn (population and mean-of-batch-variance estimators against
//   statistics computed by hand, restored state, reused/unused layers, data
//   running out, nothing to do, exceptions);
// - batch_norm_report.
// The Module pieces, freeze and BN -> GN: tests/test_norm_utils.cpp.
#include <cmath>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "minidl/nn/modules/batch_norm.h"
#include "minidl/nn/modules/instance_norm.h"
#include "minidl/nn/norm_utils.h"
#include "tests/norm_utils_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::contains;
using minidl::testing::set_values;
using minidl::testing::str_of;

namespace {

// Captures what is written to std::cerr while alive.
struct CaptureStderr {
  std::ostringstream out;
  std::streambuf* old = std::cerr.rdbuf(out.rdbuf());
  ~CaptureStderr() { std::cerr.rdbuf(old); }
};

// Per-channel population statistics of (N, C, *) tensors pooled together:
// mean and biased variance over every value of the channel, by loops.
struct ChannelStats {
  std::vector<double> mean, var;
};
ChannelStats pooled_stats(const std::vector<Tensor>& xs) {
  const int64_t C = xs.at(0).size(1);
  std::vector<std::vector<double>> values(static_cast<size_t>(C));
  for (const Tensor& x : xs) {
    const int64_t N = x.size(0), S = x.numel() / (N * C);
    const std::vector<double> v = x.to_vector<double>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t s = 0; s < S; ++s) values[c].push_back(v[(n * C + c) * S + s]);
  }
  ChannelStats st;
  for (const auto& vals : values) {
    double mean = 0.0, var = 0.0;
    for (double v : vals) mean += v;
    mean /= static_cast<double>(vals.size());
    for (double v : vals) var += (v - mean) * (v - mean);
    st.mean.push_back(mean);
    st.var.push_back(var / static_cast<double>(vals.size()));
  }
  return st;
}

// The BN paper's estimate: the average over batches of each batch's mean and unbiased variance.
ChannelStats mean_of_batch_stats(const std::vector<Tensor>& xs) {
  const size_t C = static_cast<size_t>(xs.at(0).size(1));
  ChannelStats st{std::vector<double>(C, 0.0), std::vector<double>(C, 0.0)};
  for (const Tensor& x : xs) {
    const ChannelStats b = pooled_stats({x});
    const double n = static_cast<double>(x.numel() / x.size(1));
    for (size_t c = 0; c < C; ++c) {
      st.mean[c] += b.mean[c] / static_cast<double>(xs.size());
      st.var[c] += b.var[c] * n / (n - 1.0) / static_cast<double>(xs.size());
    }
  }
  return st;
}

// Training-mode BatchNorm by hand: (x - batch mean) / sqrt(biased var + eps) * w + b.
Tensor bn_train_by_hand(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  const ChannelStats st = pooled_stats({x});
  const std::vector<double> w = weight.to_vector<double>(), b = bias.to_vector<double>();
  std::vector<double> v = x.to_vector<double>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) {
        double& e = v[(n * C + c) * S + s];
        e = (e - st.mean[c]) / std::sqrt(st.var[c] + eps) * w[c] + b[c];
      }
  return tensor(v, x.shape(), kFloat64);
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol = 1e-10) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(std::abs(got[i] - want[i]) <= 1e-12 + rtol * std::abs(want[i]), "element ", i, ": got ", got[i],
                  ", want ", want[i]);
}

// ---- models --------------------------------------------------------------------------

// One BN called twice per forward, one never called, one without running stats.
class ReuseNetImpl : public nn::Module {
 public:
  ReuseNetImpl() : Module("ReuseNet") {
    bn = register_module("bn", nn::BatchNorm1d(3));
    unused = register_module("unused", nn::BatchNorm1d(3));
    untracked = register_module("untracked", nn::BatchNorm1d(nn::BatchNormOptions(3).track_running_stats(false)));
  }
  Tensor forward(const Tensor& x) override { return bn(x) + bn(x * 2.0 + 1.0) + untracked(x); }
  nn::BatchNorm1d bn{nullptr}, unused{nullptr}, untracked{nullptr};
};
MINIDL_MODULE(ReuseNet);

// conv -> BN -> ReLU -> conv -> BN(momentum None), float64.
nn::Sequential precise_net() {
  manual_seed(7);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(2, 3, 3).padding(1)), nn::BatchNorm2d(3), nn::ReLU(),
                     nn::Conv2d(3, 4, 1), nn::BatchNorm2d(nn::BatchNormOptions(4).momentum(std::nullopt)));
  net->to(kFloat64);
  auto& bn1 = net->at<nn::BatchNorm2dImpl>(1);
  set_values(bn1.weight, tensor({1.5, 0.5, 2.0}, {3}, kFloat64));
  set_values(bn1.bias, tensor({0.1, -0.2, 0.3}, {3}, kFloat64));
  return net;
}

// Batches of different sizes and means, so the population variance and the
// mean of batch variances differ.
std::vector<Tensor> precise_batches() {
  manual_seed(11);
  const std::vector<Shape> shapes{{2, 2, 4, 5}, {3, 2, 4, 5}, {5, 2, 3, 3}, {4, 2, 4, 5}};
  std::vector<Tensor> out;
  for (size_t k = 0; k < shapes.size(); ++k)
    out.push_back(randn(shapes[k], kFloat64) * (1.0 + 0.5 * static_cast<double>(k)) + 0.7 * static_cast<double>(k));
  return out;
}

// The inputs the two BN layers of precise_net see in a training forward (bn1 uses batch statistics).
void bn_inputs_by_hand(nn::Sequential& net, const std::vector<Tensor>& batches, std::vector<Tensor>& in1,
                       std::vector<Tensor>& in2) {
  NoGradGuard no_grad;
  auto& bn1 = net->at<nn::BatchNorm2dImpl>(1);
  for (const Tensor& x : batches) {
    Tensor h1 = net[0]->forward(x);
    in1.push_back(h1);
    in2.push_back(net[3]->forward(bn_train_by_hand(h1, bn1.weight, bn1.bias, bn1.options.eps()).relu()));
  }
}

}  // namespace

// ---- PreciseBN -----------------------------------------------------------------------------------

TEST_CASE("precise_bn population estimator: the exact population mean and biased variance of each BN input") {
  nn::Sequential net = precise_net();
  const std::vector<Tensor> batches = precise_batches();
  auto& bn1 = net->at<nn::BatchNorm2dImpl>(1);
  auto& bn2 = net->at<nn::BatchNorm2dImpl>(4);
  net->train();
  for (int i = 0; i < 2; ++i) net(randn({3, 2, 4, 5}, kFloat64));  // EMA stats to start from
  set_values(bn1.num_batches_tracked, scalar_tensor(7, kInt64));
  const std::vector<double> ema_mean = bn1.running_mean.to_vector<double>();

  std::vector<Tensor> in1, in2;
  bn_inputs_by_hand(net, batches, in1, in2);
  const ChannelStats ref1 = pooled_stats(in1), ref2 = pooled_stats(in2);

  const nn::PreciseBNResult result = nn::precise_bn(*net, batches);
  CHECK(result.batches_requested == 4);
  CHECK(result.batches_run == 4);
  CHECK_FALSE(result.ran_out_early());
  CHECK(result.message.empty());
  REQUIRE(result.layers.size() == 2);
  CHECK(result.layers[0].name == "1");
  CHECK(result.layers[0].calls == 4);
  CHECK(result.layers[0].samples == 2 * 20 + 3 * 20 + 5 * 9 + 4 * 20);
  CHECK(result.layers[1].name == "4");

  check_close(bn1.running_mean.to_vector<double>(), ref1.mean);
  check_close(bn1.running_var.to_vector<double>(), ref1.var);
  check_close(bn2.running_mean.to_vector<double>(), ref2.mean);
  check_close(bn2.running_var.to_vector<double>(), ref2.var);
  CHECK(std::abs(ema_mean[0] - ref1.mean[0]) > 1e-3);  // not what the EMA had

  // Restored: momentum (incl. None), num_batches_tracked, modes.
  CHECK(bn1.options.momentum() == std::optional<double>(0.1));
  CHECK_FALSE(bn2.options.momentum().has_value());
  CHECK(bn1.num_batches_tracked.item<int64_t>() == 7);
  CHECK(bn2.num_batches_tracked.item<int64_t>() == 2);
  for (const auto& m : net->modules()) CHECK(m->is_training());

  // The layers' own forward hooks are gone: a forward updates with momentum 0.1 again.
  const std::vector<double> before = bn1.running_mean.to_vector<double>();
  Tensor x = batches[0];
  net(x);
  const ChannelStats b = pooled_stats({in1[0]});
  for (size_t c = 0; c < before.size(); ++c)
    CHECK(std::abs(bn1.running_mean.to_vector<double>()[c] - (0.9 * before[c] + 0.1 * b.mean[c])) < 1e-12);

  const std::string text = str_of(result);
  CHECK(contains(text, "population estimator"));
  CHECK(contains(text, "4 of 4 batches"));
}

TEST_CASE("precise_bn mean-of-batch-variance estimator: the average of batch means and unbiased variances") {
  nn::Sequential net = precise_net();
  const std::vector<Tensor> batches = precise_batches();
  net->train();
  std::vector<Tensor> in1, in2;
  bn_inputs_by_hand(net, batches, in1, in2);
  const ChannelStats ref1 = mean_of_batch_stats(in1), ref2 = mean_of_batch_stats(in2);
  const ChannelStats pop1 = pooled_stats(in1);

  const auto result = nn::precise_bn(*net, batches, -1, nn::PreciseBNEstimator::MeanOfBatchVariance);
  CHECK(result.estimator == nn::PreciseBNEstimator::MeanOfBatchVariance);
  auto& bn1 = net->at<nn::BatchNorm2dImpl>(1);
  auto& bn2 = net->at<nn::BatchNorm2dImpl>(4);
  check_close(bn1.running_mean.to_vector<double>(), ref1.mean);
  check_close(bn1.running_var.to_vector<double>(), ref1.var);
  check_close(bn2.running_mean.to_vector<double>(), ref2.mean);
  check_close(bn2.running_var.to_vector<double>(), ref2.var);
  // The two estimators really differ on these batches.
  CHECK(std::abs(ref1.var[0] - pop1.var[0]) > 1e-2 * pop1.var[0]);
  CHECK(contains(str_of(result), "mean_of_batch_variance"));
}

TEST_CASE("precise_bn reports data running out early, uses the batches seen, and warns") {
  nn::Sequential net = precise_net();
  const std::vector<Tensor> batches = precise_batches();
  net->train();
  std::vector<Tensor> in1, in2;
  bn_inputs_by_hand(net, {batches[0], batches[1], batches[2]}, in1, in2);
  const ChannelStats ref1 = pooled_stats(in1);

  size_t next = 0;
  auto source = [&]() -> std::optional<Tensor> {
    if (next == 3) return std::nullopt;
    return batches[next++];
  };
  CaptureStderr err;
  const auto result = nn::precise_bn(*net, source, 5);
  CHECK(result.batches_requested == 5);
  CHECK(result.batches_run == 3);
  CHECK(result.ran_out_early());
  CHECK(contains(result.message, "meant to run for 5 iterations, but the data stops at 3 iterations"));
  CHECK(contains(err.out.str(), "warning: precise_bn is meant to run for 5 iterations"));
  check_close(net->at<nn::BatchNorm2dImpl>(1).running_mean.to_vector<double>(), ref1.mean);
  check_close(net->at<nn::BatchNorm2dImpl>(1).running_var.to_vector<double>(), ref1.var);

  // A source that is empty from the start leaves everything unchanged.
  const std::vector<double> mean = net->at<nn::BatchNorm2dImpl>(1).running_mean.to_vector<double>();
  const std::vector<double> var = net->at<nn::BatchNorm2dImpl>(1).running_var.to_vector<double>();
  const auto none = nn::precise_bn(*net, []() -> std::optional<Tensor> { return std::nullopt; }, 2);
  CHECK(none.batches_run == 0);
  CHECK(contains(none.message, "left unchanged"));
  CHECK(net->at<nn::BatchNorm2dImpl>(1).running_mean.to_vector<double>() == mean);
  CHECK(net->at<nn::BatchNorm2dImpl>(1).running_var.to_vector<double>() == var);
}

TEST_CASE("precise_bn does nothing without a BatchNorm in training mode, and reads no batch") {
  nn::Sequential net = precise_net();
  int reads = 0;
  auto source = [&]() -> std::optional<Tensor> {
    ++reads;
    return randn({2, 2, 3, 3}, kFloat64);
  };
  net->eval();
  auto result = nn::precise_bn(*net, source, 3);
  CHECK(result.nothing_to_do());
  CHECK_FALSE(result.ran_out_early());
  CHECK(contains(result.message, "nothing done"));
  CHECK(reads == 0);

  net->train();
  nn::freeze_batch_norm(*net);  // frozen layers are left alone
  result = nn::precise_bn(*net, source, 3);
  CHECK(result.nothing_to_do());
  CHECK(reads == 0);
  CHECK(net->at<nn::BatchNorm2dImpl>(1).running_mean.to_vector<double>() == std::vector<double>(3, 0.0));

  CHECK_THROWS_CONTAINS(nn::precise_bn(*net, source, 0), "num_batches must be positive");
  CHECK_THROWS_CONTAINS(nn::precise_bn(*net, std::vector<Tensor>{}), "the list of batches is empty");
}

TEST_CASE("precise_bn: a BN called twice per forward counts both calls; unused and untracked layers are kept") {
  manual_seed(13);
  ReuseNet net;
  net->to(kFloat64);
  set_values(net->unused->running_mean, tensor({1.0, 2.0, 3.0}, {3}, kFloat64));
  std::vector<Tensor> batches{randn({4, 3}, kFloat64), randn({6, 3}, kFloat64) + 1.0, randn({3, 3}, kFloat64)};
  std::vector<Tensor> seen;
  for (const Tensor& x : batches) {
    seen.push_back(x);
    seen.push_back(x * 2.0 + 1.0);
  }
  const ChannelStats ref = pooled_stats(seen);

  const auto result = nn::precise_bn(*net, batches);
  REQUIRE(result.layers.size() == 2);
  CHECK(result.layers[0].name == "bn");
  CHECK(result.layers[0].calls == 6);
  CHECK(result.layers[0].samples == 2 * (4 + 6 + 3));
  CHECK(result.layers[1].name == "unused");
  CHECK(result.layers[1].calls == 0);
  CHECK(result.skipped == std::vector<std::string>{"untracked"});
  check_close(net->bn->running_mean.to_vector<double>(), ref.mean);
  check_close(net->bn->running_var.to_vector<double>(), ref.var);
  CHECK(net->unused->running_mean.to_vector<double>() == std::vector<double>{1.0, 2.0, 3.0});
  CHECK(net->unused->running_var.to_vector<double>() == std::vector<double>(3, 1.0));
  CHECK(net->bn->num_batches_tracked.item<int64_t>() == 0);
  const std::string text = str_of(result);
  CHECK(contains(text, "unused: statistics unchanged"));
  CHECK(contains(text, "skipped untracked"));
}

TEST_CASE("precise_bn restores the model when a forward throws") {
  nn::Sequential net = precise_net();
  net->train();
  net(randn({3, 2, 4, 4}, kFloat64));
  auto& bn1 = net->at<nn::BatchNorm2dImpl>(1);
  const std::vector<double> mean = bn1.running_mean.to_vector<double>(), var = bn1.running_var.to_vector<double>();
  std::vector<Tensor> batches{randn({2, 2, 3, 3}, kFloat64), randn({2, 2, 3}, kFloat64)};  // the second is 3-D
  CHECK_THROWS_CONTAINS(nn::precise_bn(*net, batches), "expected 4D input (got 3D input)");
  CHECK(bn1.running_mean.to_vector<double>() == mean);
  CHECK(bn1.running_var.to_vector<double>() == var);
  CHECK(bn1.options.momentum() == std::optional<double>(0.1));
  CHECK(bn1.num_batches_tracked.item<int64_t>() == 1);
  // The hooks were removed (a stale one would point into the dead call) and it runs again.
  net(batches[0]);
  CHECK(bn1.num_batches_tracked.item<int64_t>() == 2);
  CHECK(nn::precise_bn(*net, {batches[0]}).batches_run == 1);
}

// ---- report ------------------------------------------------------------------------------------

TEST_CASE("batch_norm_report lists every BatchNorm layer with its statistics, and prints a table") {
  nn::Sequential net(nn::Conv2d(2, 3, 1), nn::BatchNorm2d(3),
                     nn::InstanceNorm2d(nn::InstanceNormOptions(3).track_running_stats(true)),
                     nn::Sequential(nn::BatchNorm1d(nn::BatchNormOptions(4).momentum(std::nullopt).eps(1e-3))));
  auto& bn = net->at<nn::BatchNorm2dImpl>(1);
  set_values(bn.running_mean, tensor({1.0, 2.0, 6.0}, {3}));
  set_values(bn.running_var, tensor({0.5, 1.0, 4.5}, {3}));
  set_values(bn.num_batches_tracked, scalar_tensor(5, kInt64));
  auto inner = std::dynamic_pointer_cast<nn::SequentialImpl>(net[3]);
  nn::freeze_batch_norm(*inner);

  const nn::BatchNormReport report = nn::batch_norm_report(*net);
  REQUIRE(report.layers.size() == 2);  // not the InstanceNorm
  const auto& a = report.layers[0];
  CHECK(a.name == "1");
  CHECK(a.type == "BatchNorm2d");
  CHECK(a.num_features == 3);
  CHECK(a.running_mean.defined);
  CHECK(a.running_mean.min == 1.0);
  CHECK(a.running_mean.mean == doctest::Approx(3.0));
  CHECK(a.running_mean.max == 6.0);
  CHECK(a.running_var.min == 0.5);
  CHECK(a.running_var.mean == doctest::Approx(2.0));
  CHECK(a.running_var.max == 4.5);
  CHECK(a.num_batches_tracked == std::optional<int64_t>(5));
  CHECK(a.momentum == std::optional<double>(0.1));
  CHECK(a.training);
  CHECK_FALSE(a.frozen);
  const auto& b = report.layers[1];
  CHECK(b.name == "3.0");
  CHECK(b.type == "BatchNorm1d");
  CHECK(b.num_features == 4);
  CHECK_FALSE(b.momentum.has_value());
  CHECK(b.eps == 1e-3);
  CHECK_FALSE(b.training);
  CHECK(b.frozen);

  const std::string text = str_of(report);
  CHECK(contains(text, "BatchNorm report: 2 layer(s)"));
  CHECK(contains(text, "running_mean min / mean / max"));
  CHECK(contains(text, "1 / 3 / 6"));
  CHECK(contains(text, "0.5 / 2 / 4.5"));
  CHECK(contains(text, "None"));
  CHECK(contains(text, "frozen"));
  CHECK(contains(text, "train"));

  nn::BatchNorm1d untracked(nn::BatchNormOptions(2).track_running_stats(false));
  const auto r = nn::batch_norm_report(*untracked);
  REQUIRE(r.layers.size() == 1);
  CHECK(r.layers[0].name == "");
  CHECK_FALSE(r.layers[0].running_mean.defined);
  CHECK_FALSE(r.layers[0].num_batches_tracked.has_value());
  CHECK(contains(str_of(r), "(root)"));
}
