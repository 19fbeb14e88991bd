// models/: the CIFAR ResNets, SmallNet, MLP, the norm factory and create_model.
// Parameter counts and state_dict sizes come from building the same
// architectures in PyTorch 2.x (torch.nn, python3) and summing p.numel() over
// model.parameters() / len(model.state_dict()): scripts/model_param_counts.py
// (a torchvision-style CIFAR ResNet-18 has 11,173,962 params).
#include "tests/test_util.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "minidl/dist/sync_batch_norm.h"
#include "minidl/nn/modules/batch_norm.h"
#include "minidl/nn/modules/group_norm.h"
#include "minidl/nn/modules/instance_norm.h"

using namespace minidl;
using models::ModelOptions;

namespace {

int64_t count_parameters(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

std::vector<std::string> state_keys(const nn::Module& m) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : m.state_dict()) keys.push_back(k);
  return keys;
}

bool has_key(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

Tensor cifar_batch(int64_t n, int64_t channels = 3, int64_t size = 32) { return randn({n, channels, size, size}); }

// ResNet-18 is big (11 M parameters, slow to initialize under ASan): build it once.
std::shared_ptr<nn::Module> shared_resnet18() {
  static std::shared_ptr<nn::Module> model = models::create_model("resnet18");
  return model;
}

int64_t count_modules(nn::Module& m, const std::string& type) {
  int64_t n = 0;
  for (const auto& sub : m.modules()) n += sub->name() == type;
  return n;
}

}  // namespace

TEST_CASE("make_norm builds each kind") {
  auto bn = models::make_norm("batchnorm", 48).ptr_as<nn::BatchNorm2dImpl>();
  REQUIRE(bn);
  CHECK(bn->options.num_features() == 48);

  auto gn = models::make_norm("groupnorm", 48).ptr_as<nn::GroupNormImpl>();
  REQUIRE(gn);
  CHECK(gn->options.num_groups() == 24);  // largest divisor of 48 not above 32
  CHECK(models::make_norm("groupnorm", 64).ptr_as<nn::GroupNormImpl>()->options.num_groups() == 32);
  CHECK(models::make_norm("groupnorm", 16).ptr_as<nn::GroupNormImpl>()->options.num_groups() == 16);

  auto ln = models::make_norm("layernorm", 48).ptr_as<nn::GroupNormImpl>();
  REQUIRE(ln);
  CHECK(ln->options.num_groups() == 1);
  CHECK(ln->weight.shape() == Shape{48});

  auto in = models::make_norm("instancenorm", 8).ptr_as<nn::InstanceNorm2dImpl>();
  REQUIRE(in);
  CHECK(in->weight.defined());
  CHECK(!in->running_mean.defined());

  nn::AnyModule none = models::make_norm("none", 8);
  CHECK(none->name() == "Identity");
  CHECK(none->parameters().empty());
}

TEST_CASE("layernorm kind normalizes each sample over (C, H, W)") {
  nn::AnyModule ln = models::make_norm("layernorm", 3);
  Tensor x = randn({2, 3, 4, 5}) * 3.0 + 1.0;
  std::vector<double> y = ln(x).to_vector<double>();
  for (int s = 0; s < 2; ++s) {
    double mean = 0, sq = 0;
    for (int i = 0; i < 60; ++i) mean += y[s * 60 + i];
    mean /= 60;
    for (int i = 0; i < 60; ++i) sq += (y[s * 60 + i] - mean) * (y[s * 60 + i] - mean);
    CHECK(std::abs(mean) < 1e-5);
    CHECK(std::abs(sq / 60 - 1.0) < 1e-3);
  }
}

TEST_CASE("make_norm errors") {
  // SyncBN comes from converting a BatchNorm model (models/ does not depend on dist/).
  CHECK_THROWS_CONTAINS(models::make_norm("syncbatchnorm", 8), "nn::convert_sync_batch_norm(model)");
  CHECK_THROWS_CONTAINS(models::make_norm("batchnrom", 8), "unknown norm kind 'batchnrom'");
  CHECK_THROWS_CONTAINS(models::make_norm("batchnrom", 8),
                        "batchnorm, groupnorm, layernorm, instancenorm, none");
  CHECK_THROWS_CONTAINS(models::make_norm("batchnorm", 0), "positive number of channels");
}

TEST_CASE("parameter counts match PyTorch") {
  // torch: CIFAR ResNet-18 (3x3 stem, no max-pool, 1x1 conv + BN shortcuts): 11,173,962 params, 122 state keys.
  auto r18 = shared_resnet18();
  CHECK(count_parameters(*r18) == 11173962);
  CHECK(r18->state_dict().size() == 122);
  // torch: ResNet-20 / ResNet-56 with option-B shortcuts: 272,474 / 855,770 params, 128 / 344 state keys.
  auto r20 = models::create_model("resnet20");
  CHECK(count_parameters(*r20) == 272474);
  CHECK(r20->state_dict().size() == 128);
  auto r56 = models::create_model("resnet56");
  CHECK(count_parameters(*r56) == 855770);
  CHECK(r56->state_dict().size() == 344);
  // torch: the same ResNet-20 with Identity norms: 270,906; with GroupNorm (same affine params): 272,474.
  CHECK(count_parameters(*models::create_model("resnet20", ModelOptions().norm("none"))) == 270906);
  CHECK(count_parameters(*models::create_model("resnet20", ModelOptions().norm("groupnorm"))) == 272474);
  // torch: SmallNet 1,557,066 (about 1.56 M); 1 input channel 1,555,914; width 0.5 391,466; width 0.125 25,298.
  CHECK(count_parameters(*models::create_model("smallnet")) == 1557066);
  CHECK(count_parameters(*models::create_model("smallnet", ModelOptions().in_channels(1))) == 1555914);
  CHECK(count_parameters(*models::create_model("smallnet", ModelOptions().width(0.5))) == 391466);
  CHECK(count_parameters(*models::create_model("smallnet", ModelOptions().width(0.125))) == 25298);
  // torch: Linear(3072, 512), ReLU, Linear(512, 256), ReLU, Linear(256, 10): 1,707,274.
  CHECK(count_parameters(*models::create_model("mlp")) == 1707274);
}

TEST_CASE("state_dict names follow torchvision / pytorch-cifar") {
  auto r20 = models::create_model("resnet20");
  const std::vector<std::string> keys = state_keys(*r20);
  // The first 12 keys of the PyTorch model, in order.
  const std::vector<std::string> expected{
      "conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
      "layer1.0.conv1.weight", "layer1.0.bn1.weight", "layer1.0.bn1.bias", "layer1.0.bn1.running_mean",
      "layer1.0.bn1.running_var", "layer1.0.bn1.num_batches_tracked"};
  REQUIRE(keys.size() >= expected.size());
  CHECK(std::vector<std::string>(keys.begin(), keys.begin() + 12) == expected);
  CHECK(has_key(keys, "layer2.0.shortcut.0.weight"));
  CHECK(has_key(keys, "layer2.0.shortcut.1.running_var"));
  CHECK(has_key(keys, "layer3.2.conv2.weight"));
  CHECK(!has_key(keys, "layer1.0.shortcut.0.weight"));  // identity shortcut: nothing registered
  CHECK(!has_key(keys, "layer2.1.shortcut.0.weight"));
  CHECK(!has_key(keys, "conv1.bias"));  // convs have no bias
  CHECK(keys[keys.size() - 2] == "fc.weight");
  CHECK(keys.back() == "fc.bias");
  CHECK(has_key(state_keys(*shared_resnet18()), "layer4.1.bn2.weight"));

  const auto small = state_keys(*models::create_model("smallnet"));
  CHECK(small.front() == "conv1.weight");
  CHECK(has_key(small, "bn4.running_mean"));
  CHECK(small.back() == "fc.bias");

  const auto mlp = state_keys(*models::create_model("mlp"));
  CHECK(mlp == std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias",
                                        "layers.4.weight", "layers.4.bias"});
}

TEST_CASE("output shapes") {
  manual_seed(0);
  NoGradGuard no_grad;
  CHECK(models::create_model("resnet20")->forward(cifar_batch(2)).shape() == Shape{2, 10});
  CHECK(models::create_model("smallnet")->forward(cifar_batch(2)).shape() == Shape{2, 10});
  CHECK(models::create_model("mlp")->forward(cifar_batch(2)).shape() == Shape{2, 10});
  // The big ones at batch 1 only.
  CHECK(shared_resnet18()->forward(cifar_batch(1)).shape() == Shape{1, 10});
  CHECK(models::create_model("resnet56")->forward(cifar_batch(1)).shape() == Shape{1, 10});
  // Fashion-MNIST: 1 x 28 x 28, 100 classes.
  auto fm = ModelOptions().in_channels(1).num_classes(100).width(0.25).input_size(28);
  CHECK(models::create_model("smallnet", fm)->forward(cifar_batch(2, 1, 28)).shape() == Shape{2, 100});
  CHECK(models::create_model("resnet20", fm)->forward(cifar_batch(2, 1, 28)).shape() == Shape{2, 100});
  CHECK(models::create_model("mlp", fm)->forward(cifar_batch(2, 1, 28)).shape() == Shape{2, 100});
}

TEST_CASE("width multiplier and options") {
  auto m = std::dynamic_pointer_cast<models::ResNetCifarImpl>(
      models::create_model("resnet20", ModelOptions().width(0.5).in_channels(1).num_classes(7)));
  REQUIRE(m);
  CHECK(m->conv1->weight.shape() == Shape{8, 1, 3, 3});
  CHECK(m->fc->weight.shape() == Shape{7, 32});
  auto s = std::dynamic_pointer_cast<models::SmallNetImpl>(models::create_model("smallnet", ModelOptions().width(0.5)));
  REQUIRE(s);
  CHECK(s->convs[3]->weight.shape() == Shape{256, 128, 3, 3});
  auto mlp = std::dynamic_pointer_cast<models::MLPImpl>(
      models::create_model("mlp", ModelOptions().hidden_sizes({100}).width(0.5)));
  REQUIRE(mlp);
  CHECK(mlp->layers->at<nn::LinearImpl>(0).weight.shape() == Shape{50, 3072});
  CHECK(models::MLP(5, std::vector<int64_t>{}, 3)->forward(randn({4, 5})).shape() == Shape{4, 3});
}

TEST_CASE("ResNet init: kaiming normal fan_out for convs, norm weight 1 bias 0") {
  auto r18 = std::dynamic_pointer_cast<models::ResNetCifarImpl>(shared_resnet18());
  REQUIRE(r18);
  // layer4.1.conv2: 512 x 512 x 3 x 3, std = sqrt(2 / fan_out) = sqrt(2 / (512 * 9)).
  Tensor w = r18->layers[3]->at<models::BasicBlockImpl>(1).conv2->weight;
  std::vector<double> v = w.to_vector<double>();
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  const double std_dev = std::sqrt(sq / static_cast<double>(v.size()));
  CHECK(std::abs(mean) < 1e-3);
  CHECK(std_dev == doctest::Approx(std::sqrt(2.0 / (512 * 9))).epsilon(0.01));
  for (const auto& [name, t] : r18->named_parameters()) {
    if (name.find("bn") == std::string::npos && name.find("shortcut.1") == std::string::npos) continue;
    const std::vector<double> p = t.to_vector<double>();
    const double expect = name.ends_with(".weight") ? 1.0 : 0.0;
    CHECK_MESSAGE(std::all_of(p.begin(), p.end(), [&](double x) { return x == expect; }), name);
  }
}

TEST_CASE("every norm kind builds and runs forward + backward") {
  manual_seed(2);
  for (const std::string kind : {"batchnorm", "groupnorm", "layernorm", "instancenorm", "none"}) {
    for (const std::string name : {"resnet20", "smallnet"}) {
      CAPTURE(kind);
      CAPTURE(name);
      auto model = models::create_model(name, ModelOptions().norm(kind).width(name == "resnet20" ? 0.25 : 0.125));
      Tensor y = model->forward(cifar_batch(2));
      REQUIRE(y.shape() == Shape{2, 10});
      y.sum().backward();
      for (const auto& [pname, p] : model->named_parameters()) {
        CAPTURE(pname);
        REQUIRE(p.grad().defined());
        const std::vector<double> g = p.grad().to_vector<double>();
        CHECK(std::all_of(g.begin(), g.end(), [](double x) { return std::isfinite(x); }));
      }
      if (kind == "none") CHECK(count_modules(*model, "Identity") > 0);
    }
  }
}

TEST_CASE("BatchNorm -> GroupNorm conversion swaps the AnyModule norms of resnet20") {
  manual_seed(3);
  std::shared_ptr<nn::Module> model = models::create_model("resnet20");
  // 1 stem + 9 blocks x 2 + 2 projection shortcuts = 21 BatchNorm2d.
  CHECK(count_modules(*model, "BatchNorm2d") == 21);
  auto report = nn::convert_batch_norm_to_group_norm(model);
  CHECK(report.layers.size() == 21);
  for (const auto& l : report.layers) {
    CAPTURE(l.name);
    CHECK(!l.still_referenced);  // no typed member kept the old BN
  }
  CHECK(count_modules(*model, "BatchNorm2d") == 0);
  CHECK(count_modules(*model, "GroupNorm") == 21);
  auto resnet = std::dynamic_pointer_cast<models::ResNetCifarImpl>(model);
  REQUIRE(resnet);
  CHECK(resnet->bn1.ptr_as<nn::GroupNormImpl>() != nullptr);  // the member follows the swap
  CHECK(resnet->layers[1]->at<models::BasicBlockImpl>(0).bn2.ptr_as<nn::GroupNormImpl>() != nullptr);
  CHECK(has_key(state_keys(*model), "layer2.0.shortcut.1.weight"));
  CHECK(!has_key(state_keys(*model), "bn1.running_mean"));

  // The forward really runs the GroupNorms: each gets a gradient.
  Tensor y = model->forward(cifar_batch(2));
  CHECK(y.shape() == Shape{2, 10});
  y.sum().backward();
  for (const auto& [name, m] : model->named_modules()) {
    if (m->name() != "GroupNorm") continue;
    CAPTURE(name);
    CHECK(std::static_pointer_cast<nn::GroupNormImpl>(m)->weight.grad().defined());
  }
}

TEST_CASE("BatchNorm -> GroupNorm conversion on SmallNet") {
  std::shared_ptr<nn::Module> model = models::create_model("smallnet", ModelOptions().width(0.125));
  auto report = nn::convert_batch_norm_to_group_norm(model);
  CHECK(report.layers.size() == 4);
  for (const auto& l : report.layers) CHECK(!l.still_referenced);
  auto net = std::dynamic_pointer_cast<models::SmallNetImpl>(model);
  REQUIRE(net);
  for (const nn::AnyModule& norm : net->norms) {
    auto gn = norm.ptr_as<nn::GroupNormImpl>();
    REQUIRE(gn);
    CHECK(gn->options.num_groups() == nn::group_norm_groups_for(gn->options.num_channels()));
  }
  Tensor y = model->forward(cifar_batch(2));
  y.sum().backward();
  for (const nn::AnyModule& norm : net->norms) CHECK(norm.ptr_as<nn::GroupNormImpl>()->weight.grad().defined());
}

TEST_CASE("create_model and model errors") {
  CHECK_THROWS_CONTAINS(models::create_model("resnet50"), "unknown model 'resnet50'");
  CHECK_THROWS_CONTAINS(models::create_model("resnet50"), "resnet18, resnet20, resnet56, smallnet, mlp");
  CHECK_THROWS_CONTAINS(models::create_model("resnet20", ModelOptions().norm("batchnrom")),
                        "unknown norm kind 'batchnrom'");
  CHECK_THROWS_CONTAINS(models::create_model("smallnet", ModelOptions().norm("syncbatchnorm")),
                        "convert_sync_batch_norm");
  CHECK_THROWS_CONTAINS(models::create_model("mlp", ModelOptions().norm("groupnorm")), "no normalization layers");
  CHECK_THROWS_CONTAINS(models::create_model("smallnet", ModelOptions().width(0.0)), "width multiplier > 0");
  CHECK_THROWS_CONTAINS(models::create_model("resnet20", ModelOptions().num_classes(0)), "num_classes > 0");
  CHECK_THROWS_CONTAINS(models::create_model("smallnet", ModelOptions().in_channels(-1)), "in_channels > 0");
  CHECK_THROWS_CONTAINS(models::create_model("mlp", ModelOptions().hidden_sizes({4, 0})), "hidden sizes > 0");
  auto tiny = ModelOptions().width(0.125);
  CHECK_THROWS_CONTAINS(models::create_model("resnet20", tiny)->forward(randn({3, 32, 32})), "expected a 4D");
  CHECK_THROWS_CONTAINS(models::create_model("smallnet", tiny)->forward(Tensor()), "undefined tensor");
  CHECK_THROWS_CONTAINS(models::create_model("mlp", tiny)->forward(randn({2, 3, 28, 28})),
                        "expected 3072 features per sample, got 2352");
  // Wrong channel count: the conv's own PyTorch-worded error.
  CHECK_THROWS(models::create_model("smallnet", tiny)->forward(randn({2, 1, 32, 32})));
}
