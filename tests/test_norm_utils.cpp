// nn/norm_utils and the Module pieces it rests on:
// - Module: AnyModule members follow replace_module, eval lock, forward pre-hooks;
// - freeze_batch_norm / unfreeze_batch_norm (only BN, survives train());
// - convert_batch_norm_to_group_norm (group choice, gamma/beta, outputs equal a
//   hand-computed GroupNorm, report, hand-written models, root and shared BN).
// precise_bn and batch_norm_report: tests/test_norm_utils_stats.cpp.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "minidl/nn/modules/batch_norm.h"
#include "minidl/nn/modules/group_norm.h"
#include "minidl/nn/modules/instance_norm.h"
#include "minidl/nn/norm_utils.h"
#include "tests/norm_utils_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::contains;
using minidl::testing::max_abs_diff;
using minidl::testing::set_values;
using minidl::testing::str_of;

namespace {

// GroupNorm by hand: statistics per (sample, group of C/G channels), biased variance.
Tensor group_norm_by_hand(const Tensor& x, int64_t G, const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C), per = C / G;
  std::vector<double> v = x.to_vector<double>();
  const std::vector<double> w = weight.defined() ? weight.to_vector<double>() : std::vector<double>(C, 1.0);
  const std::vector<double> b = bias.defined() ? bias.to_vector<double>() : std::vector<double>(C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t begin = (n * C + g * per) * S, count = per * S;
      double mean = 0.0, var = 0.0;
      for (int64_t i = 0; i < count; ++i) mean += v[begin + i];
      mean /= static_cast<double>(count);
      for (int64_t i = 0; i < count; ++i) var += (v[begin + i] - mean) * (v[begin + i] - mean);
      var /= static_cast<double>(count);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t c = g * per + i / S;
        v[begin + i] = (v[begin + i] - mean) / std::sqrt(var + eps) * w[c] + b[c];
      }
    }
  return tensor(v, x.shape(), kFloat64);
}

// ---- models --------------------------------------------------------------------------

// A hand-written model whose norm layers are swappable members (nn::AnyModule).
class SwapNetImpl : public nn::Module {
 public:
  SwapNetImpl() : Module("SwapNet") {
    conv = register_module("conv", nn::Conv2d(nn::Conv2dOptions(2, 6, 3).padding(1)));
    norm = register_module("norm", nn::AnyModule(nn::BatchNorm2d(6)));
    block = register_module("block", nn::Sequential(nn::Conv2d(6, 6, 1), nn::BatchNorm2d(6)));
  }
  Tensor forward(const Tensor& x) override { return block(norm(conv(x)).relu()); }
  nn::Conv2d conv{nullptr};
  nn::AnyModule norm;
  nn::Sequential block{nullptr};
};
MINIDL_MODULE(SwapNet);

// A typed member: replace_module cannot re-point it.
class TypedNetImpl : public nn::Module {
 public:
  TypedNetImpl() : Module("TypedNet") { bn = register_module("bn", nn::BatchNorm2d(4)); }
  Tensor forward(const Tensor& x) override { return bn(x); }
  nn::BatchNorm2d bn{nullptr};
};
MINIDL_MODULE(TypedNet);

}  // namespace

// ---- Module: AnyModule, eval lock, forward pre-hooks ------------------------------------------

TEST_CASE("AnyModule members follow replace_module; copies alias the same slot") {
  SwapNet net;
  nn::AnyModule alias = net->norm;
  REQUIRE(net->norm.ptr_as<nn::BatchNorm2dImpl>() != nullptr);
  nn::GroupNorm gn(3, 6);
  std::shared_ptr<nn::Module> old = net->replace_module("norm", gn.ptr());
  CHECK(dynamic_cast<nn::BatchNorm2dImpl*>(old.get()) != nullptr);
  CHECK(net->norm.ptr().get() == gn.get());
  CHECK(alias.ptr().get() == gn.get());
  CHECK(net->child("norm").get() == gn.get());
  CHECK(net->norm.ptr_as<nn::BatchNorm2dImpl>() == nullptr);
  // The member now calls the GroupNorm.
  Tensor x = randn({2, 6, 3, 3});
  CHECK(max_abs_diff(net->norm(x), gn(x)) == 0.0);
  CHECK(net->norm->name() == "GroupNorm");

  // A registration whose AnyModule died: replace_module still works.
  nn::Sequential seq;
  seq->register_module("act", nn::AnyModule(nn::ReLU()));
  seq->replace_module("act", nn::Tanh().ptr());
  CHECK(seq->child("act")->name() == "Tanh");

  CHECK_THROWS_CONTAINS(seq->register_module("empty", nn::AnyModule()), "is empty");
  CHECK_THROWS_CONTAINS(nn::AnyModule()(x), "empty AnyModule");
}

TEST_CASE("set_eval_locked keeps a module in eval through train(); unlocking gives control back") {
  nn::Sequential net(nn::Linear(2, 2), nn::BatchNorm1d(2));
  net[1]->set_eval_locked(true);
  CHECK_FALSE(net[1]->is_training());
  net->train();
  CHECK(net->is_training());
  CHECK(net[0]->is_training());
  CHECK_FALSE(net[1]->is_training());
  net[1]->train(true);
  CHECK_FALSE(net[1]->is_training());
  net[1]->set_eval_locked(false);
  CHECK_FALSE(net[1]->is_training());  // unlocking does not change the mode
  net->train();
  CHECK(net[1]->is_training());
}

TEST_CASE("BatchNorm runs its forward pre-hooks on every call path; removed hooks stop") {
  nn::BatchNorm2d bn(3);
  nn::Sequential seq(bn);
  std::vector<Shape> seen;
  HookId id = bn->register_forward_pre_hook([&](nn::Module& m, const Tensor& input) {
    CHECK(&m == bn.get());
    seen.push_back(input.shape());
  });
  bn(randn({2, 3, 2, 2}));           // through the holder
  seq(randn({4, 3, 1, 2}));          // through a container
  bn->forward(randn({2, 3, 1, 1}));  // directly
  CHECK(seen == std::vector<Shape>{{2, 3, 2, 2}, {4, 3, 1, 2}, {2, 3, 1, 1}});
  bn->remove_forward_pre_hook(id);
  bn(randn({2, 3, 2, 2}));
  CHECK(seen.size() == 3);
  bn->remove_forward_pre_hook(12345);  // unknown: ignored
}

// ---- freeze ----------------------------------------------------------------------------------

TEST_CASE("freeze_batch_norm freezes only BatchNorm, and the freeze survives train()") {
  manual_seed(3);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)), nn::BatchNorm2d(4),
                     nn::InstanceNorm2d(nn::InstanceNormOptions(4).track_running_stats(true)), nn::Dropout(0.5));
  auto& bn = net->at<nn::BatchNorm2dImpl>(1);
  auto& in = net->at<nn::InstanceNorm2dImpl>(2);
  for (int i = 0; i < 3; ++i) net(randn({4, 2, 5, 5}) * 2.0 + 1.0);  // non-trivial running stats
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);

  CHECK(nn::freeze_batch_norm(*net) == std::vector<std::string>{"1"});
  net->train();  // what every epoch of a training loop does
  CHECK(net->is_training());
  CHECK(net[0]->is_training());
  CHECK_FALSE(bn.is_training());
  CHECK(bn.is_eval_locked());
  CHECK(in.is_training());
  CHECK(net[3]->is_training());

  const Tensor mean_before = bn.running_mean.clone(), var_before = bn.running_var.clone();
  const Tensor in_mean_before = in.running_mean.clone();
  Tensor x = randn({4, 2, 5, 5}) * 3.0 - 1.0;
  Tensor y = net(x);
  // BN: running stats and counter unchanged.
  CHECK(max_abs_diff(bn.running_mean, mean_before) == 0.0);
  CHECK(max_abs_diff(bn.running_var, var_before) == 0.0);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);
  // InstanceNorm still updates its running stats in training.
  CHECK(max_abs_diff(in.running_mean, in_mean_before) > 1e-4);
  // BN normalizes with the running stats: (h - running_mean) / sqrt(running_var + eps) * w + b.
  Tensor h = net[0]->forward(x);
  auto col = [](const Tensor& t) { return t.reshape({1, -1, 1, 1}); };
  Tensor expected = (h - col(bn.running_mean)) / (col(bn.running_var) + bn.options.eps()).sqrt() * col(bn.weight) +
                    col(bn.bias);
  CHECK(allclose(net[1]->forward(h), expected, 1e-5, 1e-5));
  // Dropout still active: each output is 0 or twice the undropped value.
  Tensor z = net[2]->forward(net[1]->forward(h));
  const std::vector<double> yv = y.to_vector<double>(), zv = z.to_vector<double>();
  int64_t zeros = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    if (yv[i] == 0.0) {
      ++zeros;
      continue;
    }
    CHECK(std::abs(yv[i] - 2.0 * zv[i]) <= 1e-4 * (1.0 + std::abs(zv[i])));
  }
  CHECK(zeros > static_cast<int64_t>(yv.size()) / 4);
  CHECK(zeros < static_cast<int64_t>(yv.size()) * 3 / 4);

  net->eval();
  net->train();
  CHECK_FALSE(bn.is_training());

  CHECK(nn::unfreeze_batch_norm(*net) == std::vector<std::string>{"1"});
  CHECK(bn.is_training());  // its parent's mode
  CHECK_FALSE(bn.is_eval_locked());
  net(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 4);
  CHECK(max_abs_diff(bn.running_mean, mean_before) > 1e-4);
  CHECK(nn::unfreeze_batch_norm(*net).empty());
}

// ---- BN -> GN ----------------------------------------------------------------------------------

TEST_CASE("group_norm_groups_for picks the largest divisor not above max_groups") {
  CHECK(nn::group_norm_groups_for(48) == 24);  // Opacus' min(32, 48) = 32 would not divide 48
  CHECK(nn::group_norm_groups_for(64) == 32);
  CHECK(nn::group_norm_groups_for(96) == 32);
  CHECK(nn::group_norm_groups_for(100) == 25);
  CHECK(nn::group_norm_groups_for(7) == 7);
  CHECK(nn::group_norm_groups_for(7, 4) == 1);
  CHECK(nn::group_norm_groups_for(37) == 1);
  CHECK(nn::group_norm_groups_for(12, 8) == 6);
  CHECK(nn::group_norm_groups_for(1) == 1);
  CHECK(nn::group_norm_groups_for(0) == 1);
  CHECK_THROWS_CONTAINS(nn::group_norm_groups_for(8, 0), "max_groups >= 1");
}

TEST_CASE("convert_batch_norm_to_group_norm: C=48 and C=64, gamma/beta carried, outputs equal GroupNorm by hand") {
  manual_seed(5);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(3, 48, 3).padding(1)), nn::BatchNorm2d(48), nn::ReLU(),
                     nn::Conv2d(48, 64, 1), nn::BatchNorm2d(nn::BatchNormOptions(64).eps(1e-3)), nn::ReLU());
  net->to(kFloat64);
  set_values(net->at<nn::BatchNorm2dImpl>(1).weight, rand({48}, kFloat64) + 0.5);
  set_values(net->at<nn::BatchNorm2dImpl>(1).bias, randn({48}, kFloat64));
  set_values(net->at<nn::BatchNorm2dImpl>(4).weight, rand({64}, kFloat64) + 0.5);
  set_values(net->at<nn::BatchNorm2dImpl>(4).bias, randn({64}, kFloat64));
  for (int i = 0; i < 3; ++i) net(randn({2, 3, 4, 4}, kFloat64));
  net->at<nn::BatchNorm2dImpl>(4).weight.requires_grad_(false);  // carried over too
  const std::vector<double> w1 = net->at<nn::BatchNorm2dImpl>(1).weight.to_vector<double>();
  const std::vector<double> b1 = net->at<nn::BatchNorm2dImpl>(1).bias.to_vector<double>();
  const std::vector<double> w4 = net->at<nn::BatchNorm2dImpl>(4).weight.to_vector<double>();
  const std::vector<double> b4 = net->at<nn::BatchNorm2dImpl>(4).bias.to_vector<double>();
  net->eval();
  Tensor x = randn({2, 3, 5, 4}, kFloat64);
  Tensor y_bn = net(x);

  const nn::GroupNormConversionReport report = nn::convert_batch_norm_to_group_norm(*net);
  REQUIRE(report.layers.size() == 2);
  CHECK_FALSE(report.root_replaced);
  const auto& l1 = report.layers[0];
  const auto& l4 = report.layers[1];
  CHECK(l1.name == "1");
  CHECK(l1.from == "BatchNorm2d");
  CHECK(l1.num_channels == 48);
  CHECK(l1.num_groups == 24);
  CHECK(l1.eps == 1e-5);
  CHECK(l1.affine);
  CHECK(l1.dropped_running_stats);
  CHECK(l1.dropped_num_batches_tracked == std::optional<int64_t>(3));
  CHECK_FALSE(l1.still_referenced);
  CHECK(l4.name == "4");
  CHECK(l4.num_channels == 64);
  CHECK(l4.num_groups == 32);
  CHECK(l4.eps == 1e-3);

  auto& gn1 = net->at<nn::GroupNormImpl>(1);
  auto& gn4 = net->at<nn::GroupNormImpl>(4);
  CHECK(gn1.options.num_groups() == 24);
  CHECK(gn1.options.num_channels() == 48);
  CHECK(gn4.options.num_groups() == 32);
  CHECK(gn4.options.eps() == 1e-3);
  CHECK(gn1.weight.dtype() == kFloat64);  // the BN's dtype
  CHECK(gn1.weight.to_vector<double>() == w1);
  CHECK(gn1.bias.to_vector<double>() == b1);
  CHECK(gn4.weight.to_vector<double>() == w4);
  CHECK(gn4.bias.to_vector<double>() == b4);
  CHECK(gn1.weight.requires_grad());
  CHECK_FALSE(gn4.weight.requires_grad());
  CHECK_FALSE(gn1.is_training());  // the parent's mode (eval)
  CHECK(net->named_buffers().empty());

  // Layer by layer and end to end against GroupNorm computed by hand.
  NoGradGuard no_grad;
  Tensor h1 = net[0]->forward(x);
  CHECK(max_abs_diff(net[1]->forward(h1), group_norm_by_hand(h1, 24, gn1.weight, gn1.bias, 1e-5)) < 1e-12);
  Tensor h4 = net[3]->forward(group_norm_by_hand(h1, 24, gn1.weight, gn1.bias, 1e-5).relu());
  Tensor expected = group_norm_by_hand(h4, 32, gn4.weight, gn4.bias, 1e-3).relu();
  Tensor y = net(x);
  CHECK(max_abs_diff(y, expected) < 1e-12);
  CHECK(max_abs_diff(y, y_bn) > 1e-3);  // the model did change

  const std::string text = str_of(report);
  CHECK(contains(text, "2 layer(s) converted"));
  CHECK(contains(text, "num_batches_tracked=3"));
  CHECK(contains(text, "running_mean, running_var"));
  CHECK(contains(text, "1e-05"));
  CHECK(contains(text, "0.001"));
  CHECK_FALSE(contains(text, "warning"));
}

TEST_CASE("convert_batch_norm_to_group_norm: affine=False and untracked BN, shared BN converted once") {
  nn::BatchNorm1d shared(nn::BatchNormOptions(7).affine(false).track_running_stats(false));
  nn::Sequential net(shared, nn::ReLU(), shared);
  const auto report = nn::convert_batch_norm_to_group_norm(*net);
  REQUIRE(report.layers.size() == 1);
  CHECK(report.layers[0].name == "0");
  CHECK(report.layers[0].num_groups == 7);
  CHECK_FALSE(report.layers[0].affine);
  CHECK_FALSE(report.layers[0].dropped_running_stats);
  CHECK_FALSE(report.layers[0].dropped_num_batches_tracked.has_value());
  CHECK(report.layers[0].still_referenced);  // the `shared` handle of this test
  CHECK(net[0].get() == net[2].get());
  auto& gn = net->at<nn::GroupNormImpl>(0);
  CHECK_FALSE(gn.weight.defined());
  CHECK(net->parameters().empty());
  Tensor x = randn({5, 7, 3}, kFloat64);
  CHECK(max_abs_diff(gn.forward(x), group_norm_by_hand(x, 7, Tensor(), Tensor(), 1e-5)) < 1e-12);
  CHECK(contains(str_of(report), "warning: something besides the registry still holds the old 0"));
}

TEST_CASE("convert_batch_norm_to_group_norm on a hand-written model: AnyModule members call the new GroupNorm") {
  manual_seed(9);
  SwapNet net;
  net->to(kFloat64);
  auto& inner_bn = net->block->at<nn::BatchNorm2dImpl>(1);
  set_values(inner_bn.weight, rand({6}, kFloat64) + 0.5);
  set_values(inner_bn.bias, randn({6}, kFloat64));
  const std::vector<double> inner_w = inner_bn.weight.to_vector<double>();
  Tensor x = randn({3, 2, 4, 4}, kFloat64);
  Tensor y_bn = net(x);

  const auto report = nn::convert_batch_norm_to_group_norm(*net, /*max_groups=*/4);
  REQUIRE(report.layers.size() == 2);
  CHECK(report.layers[0].name == "norm");
  CHECK(report.layers[0].num_groups == 3);  // largest divisor of 6 not above 4
  CHECK(report.layers[1].name == "block.1");
  CHECK_FALSE(report.layers[0].still_referenced);
  CHECK_FALSE(report.layers[1].still_referenced);
  auto gn = net->norm.ptr_as<nn::GroupNormImpl>();
  REQUIRE(gn != nullptr);
  CHECK(net->child("norm").get() == gn.get());
  auto& inner_gn = net->block->at<nn::GroupNormImpl>(1);
  CHECK(inner_gn.weight.to_vector<double>() == inner_w);

  NoGradGuard no_grad;
  Tensor h = group_norm_by_hand(net->conv(x), 3, gn->weight, gn->bias, 1e-5).relu();
  Tensor expected = group_norm_by_hand(net->block[0]->forward(h), 3, inner_gn.weight, inner_gn.bias, 1e-5);
  Tensor y = net(x);
  CHECK(max_abs_diff(y, expected) < 1e-12);
  CHECK(max_abs_diff(y, y_bn) > 1e-3);
}

TEST_CASE("convert_batch_norm_to_group_norm: a typed member is reported; a root BN needs the shared_ptr overload") {
  TypedNet typed;
  const auto report = nn::convert_batch_norm_to_group_norm(*typed);
  REQUIRE(report.layers.size() == 1);
  CHECK(report.layers[0].still_referenced);
  CHECK(typed->child("bn")->name() == "GroupNorm");
  CHECK(typed->bn->name() == "BatchNorm2d");  // the typed member cannot follow
  CHECK(contains(str_of(report), "typed member"));

  std::shared_ptr<nn::Module> root = std::make_shared<nn::BatchNorm2dImpl>(48);
  CHECK_THROWS_CONTAINS(nn::convert_batch_norm_to_group_norm(*root), "pass it as a std::shared_ptr<Module>&");
  const auto root_report = nn::convert_batch_norm_to_group_norm(root);
  CHECK(root_report.root_replaced);
  REQUIRE(root_report.layers.size() == 1);
  CHECK(root_report.layers[0].name == "");
  CHECK(root_report.layers[0].num_groups == 24);
  CHECK_FALSE(root_report.layers[0].still_referenced);
  auto gn = std::dynamic_pointer_cast<nn::GroupNormImpl>(root);
  REQUIRE(gn != nullptr);
  CHECK(gn->options.num_groups() == 24);
  CHECK(contains(str_of(root_report), "(root)"));

  nn::Sequential plain(nn::Linear(2, 2));
  CHECK(nn::convert_batch_norm_to_group_norm(*plain).layers.empty());
  CHECK_THROWS_CONTAINS(nn::convert_batch_norm_to_group_norm(*plain, 0), "max_groups >= 1");
}
