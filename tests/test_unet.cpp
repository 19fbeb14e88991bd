// models::UNet2d / UNet3d: shapes, parameter counts and a forward/backward
// golden against the PyTorch module of scripts/unet_reference.py (which also
// printed the counts below), errors, SyncBN conversion, a few training steps,
// and the same model on the test device.
#include <map>
#include <string>

#include "minidl/dist/sync_batch_norm.h"
#include "minidl/minidl.h"
#include "tests/device_test_util.h"
#include "tests/golden_util.h"
#include "tests/test_util.h"

using namespace minidl;
using models::UNetOptions;

namespace {

int64_t count_parameters(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST_CASE("make_norm: spatial_dims picks the 1-D, 2-D or 3-D layer") {
  CHECK(models::make_norm("batchnorm", 8, 3).ptr_as<nn::BatchNorm3dImpl>() != nullptr);
  CHECK(models::make_norm("batchnorm", 8, 1).ptr_as<nn::BatchNorm1dImpl>() != nullptr);
  CHECK(models::make_norm("batchnorm", 8).ptr_as<nn::BatchNorm2dImpl>() != nullptr);
  CHECK(models::make_norm("instancenorm", 8, 3).ptr_as<nn::InstanceNorm3dImpl>() != nullptr);
  CHECK(models::make_norm("groupnorm", 8, 3).ptr_as<nn::GroupNormImpl>() != nullptr);
  CHECK_THROWS_WITH_AS(models::make_norm("batchnorm", 8, 4), doctest::Contains("expected spatial_dims 1, 2 or 3, got 4"),
                       minidl::Error);
}

TEST_CASE("UNet2d / UNet3d keep the input's spatial size") {
  manual_seed(0);
  models::UNet3d net3(1, 2, 2);
  CHECK(net3(randn({2, 1, 8, 16, 8})).shape() == Shape{2, 2, 8, 16, 8});
  models::UNet2d net2(3, 1, 4);
  CHECK(net2(randn({2, 3, 16, 24})).shape() == Shape{2, 1, 16, 24});
  models::UNet3d interp(UNetOptions().base_width(2).upsample("interpolate").levels(3).norm("groupnorm"));
  CHECK(interp(randn({1, 1, 4, 8, 12})).shape() == Shape{1, 1, 4, 8, 12});
  models::UNet2d one_level(UNetOptions().base_width(3).levels(1));  // no pooling: a double conv and the head
  CHECK(one_level(randn({2, 1, 5, 7})).shape() == Shape{2, 1, 5, 7});
}

TEST_CASE("UNet parameter counts equal PyTorch's (scripts/unet_reference.py)") {
  // {parameters, state_dict entries}, as printed by the script.
  CHECK(count_parameters(*models::UNet3d(1, 1)) == 1401265);
  CHECK(models::UNet3d(1, 1)->state_dict().size() == 92);
  CHECK(count_parameters(*models::UNet3d(1, 1, 16, "groupnorm")) == 1401265);
  CHECK(models::UNet3d(1, 1, 16, "groupnorm")->state_dict().size() == 50);
  CHECK(count_parameters(*models::UNet3d(UNetOptions().upsample("interpolate"))) == 1326001);
  CHECK(count_parameters(*models::UNet3d(1, 1, 16, "none")) == 1400561);
  CHECK(models::UNet3d(1, 1, 16, "none")->state_dict().size() == 36);
  CHECK(count_parameters(*models::UNet3d(1, 1, 4)) == 87949);
  CHECK(count_parameters(*models::UNet3d(1, 1, 32)) == 5601121);
  CHECK(count_parameters(*models::UNet2d(1, 1)) == 482449);
  CHECK(count_parameters(*models::UNet2d(3, 2, 64)) == 7700226);
  CHECK(count_parameters(*models::UNet2d(UNetOptions().base_width(8).levels(3))) == 29481);
  CHECK(models::UNet2d(UNetOptions().base_width(8).levels(3))->state_dict().size() == 66);
}

TEST_CASE("UNet names follow the PyTorch module tree") {
  models::UNet3d net(1, 1, 2);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, p] : net->named_parameters()) shapes[name] = p.shape();
  CHECK(shapes.at("encoders.0.0.weight") == Shape{2, 1, 3, 3, 3});
  CHECK(shapes.at("encoders.0.1.weight") == Shape{2});  // the first norm
  CHECK(shapes.at("encoders.3.3.weight") == Shape{16, 16, 3, 3, 3});
  CHECK(shapes.at("ups.2.conv.weight") == Shape{16, 8, 2, 2, 2});  // ConvTranspose3d: (in, out, k, k, k)
  CHECK(shapes.at("ups.2.conv.bias") == Shape{8});
  CHECK(shapes.at("decoders.0.0.weight") == Shape{2, 4, 3, 3, 3});
  CHECK(shapes.at("head.weight") == Shape{1, 2, 1, 1, 1});
  CHECK(shapes.count("encoders.0.0.bias") == 0);  // no conv bias before a norm
}

TEST_CASE("UNet forward and backward match PyTorch (golden, train mode)") {
  const testing::Golden g = testing::load_golden("unet.safetensors");
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const auto& c = g.cases[i];
    CAPTURE(c.dump());
    const UNetOptions o = UNetOptions()
                              .in_channels(c.at("in_channels").get<int64_t>())
                              .classes(c.at("classes").get<int64_t>())
                              .base_width(c.at("base_width").get<int64_t>())
                              .norm(c.at("norm").get<std::string>())
                              .upsample(c.at("upsample").get<std::string>())
                              .levels(c.at("levels").get<int64_t>());
    for (const testing::Precision& p : testing::kPrecisions) {
      CAPTURE(std::string(dtype_name(p.dtype)));
      std::shared_ptr<models::UNetImpl> net;
      if (c.at("dims").get<int>() == 2)
        net = models::UNet2d(o).ptr();
      else
        net = models::UNet3d(o).ptr();
      CHECK(count_parameters(*net) == c.at("num_parameters").get<int64_t>());
      net->to(p.dtype);
      {
        NoGradGuard no_grad;
        for (auto& [name, param] : net->named_parameters()) {
          REQUIRE_MESSAGE(g.has(i, "param." + name), "PyTorch has no parameter ", name);
          param.copy_(g.get(i, "param." + name).to(p.dtype));
        }
      }
      Tensor x = g.get(i, "x").to(p.dtype).detach().requires_grad_(true);
      Tensor y = net->forward(x);
      testing::check_close("y", y, g.get(i, "y"), p);
      (y * g.get(i, "gy").to(p.dtype)).sum().backward();
      testing::check_close("gx", x.grad(), g.get(i, "gx"), p);
      for (auto& [name, param] : net->named_parameters())
        testing::check_close("grad of " + name, param.grad(), g.get(i, "grad." + name), p);
    }
  }
}

TEST_CASE("UNet errors name the model, what it expected and what it got") {
  models::UNet3d net(1, 1, 2);
  CHECK_THROWS_WITH_AS(net(randn({1, 1, 8, 8})), doctest::Contains("UNet3d: expected a 5D (N, C, D, H, W) input, got 4D"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS(net(randn({1, 2, 8, 8, 8})),
                       doctest::Contains("UNet3d: expected input with 1 channels, got input size [1, 2, 8, 8, 8]"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS(net(randn({1, 1, 8, 12, 8})),
                       doctest::Contains("UNet3d: expected every spatial size divisible by 8 (3 poolings by 2), got "
                                         "input size [1, 1, 8, 12, 8]"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS(models::UNet2d(UNetOptions().upsample("pixelshuffle")),
                       doctest::Contains("UNet2d: unknown upsample mode 'pixelshuffle'; expected transpose or interpolate"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS(models::UNet2d(UNetOptions().base_width(0)), doctest::Contains("expected base_width > 0, got 0"),
                       minidl::Error);
  CHECK_THROWS_WITH_AS(models::UNet3d(1, 1, 4, "syncbatchnorm"), doctest::Contains("convert_sync_batch_norm"),
                       minidl::Error);
}

TEST_CASE("convert_sync_batch_norm reaches every norm of a UNet3d") {
  auto net = nn::convert_sync_batch_norm(models::UNet3d(1, 1, 2).ptr());
  int64_t sync = 0, bn = 0;
  for (const auto& [name, m] : net->named_modules()) {
    if (dynamic_cast<const nn::SyncBatchNormImpl*>(m.get())) ++sync;
    else if (dynamic_cast<const nn::BatchNormImplBase*>(m.get())) ++bn;
  }
  CHECK(sync == 2 * (4 + 3));  // two per double conv: 4 encoders, 3 decoders
  CHECK(bn == 0);
}

TEST_CASE("a few Adam steps on BCE + Dice reduce the loss of a small UNet3d") {
  // The task: mark the voxels of a smoothed random field above zero; learnable
  // by the first levels alone, so 40 steps of a width-4 net halve the loss (1.31 -> 0.51
  // measured) and reach a Dice above 0.8 (0.92 measured).
  manual_seed(1);
  models::UNet3d net(UNetOptions().base_width(4).levels(3));
  optim::Adam opt(net->parameters(), 1e-2);
  nn::BCEDiceLoss criterion;
  const Tensor x = avg_pool3d(randn({4, 1, 12, 12, 12}), {3, 3, 3}, {1, 1, 1}, {1, 1, 1}).narrow(2, 0, 8);
  const Tensor y = gt(x, 0.0);
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    Tensor loss = criterion(net(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<float>();
  }
  INFO("loss ", first, " -> ", last);
  CHECK(last < 0.5 * first);
  net->eval();
  NoGradGuard no_grad;
  metrics::OverlapOptions o;
  o.from_logits = true;
  CHECK(metrics::dice_score(net(x), y, o).item<double>() > 0.8);
}

TEST_CASE("UNet3d on the test device: the same numbers as the CPU, no CPU tensor") {
  for (const std::string& up : {"transpose", "interpolate"}) {
    CAPTURE(up);
    manual_seed(5);
    auto cpu = models::UNet3d(UNetOptions().base_width(2).levels(3).upsample(up)).ptr();
    manual_seed(5);
    auto dev = models::UNet3d(UNetOptions().base_width(2).levels(3).upsample(up)).ptr();
    dev->to(kTestDevice);
    const Tensor x = randn({2, 1, 8, 8, 4});
    const Tensor x_dev = x.to(kTestDevice);
    Tensor y_cpu = cpu->forward(x);
    y_cpu.sum().backward();
    Tensor y_dev;
    const int64_t made = testing::cpu_storages_made([&] {
      y_dev = dev->forward(x_dev);
      y_dev.sum().backward();
    });
    CHECK(made == 0);
    CHECK(y_dev.device() == kTestDevice);
    CHECK(testing::max_abs_diff(y_dev, y_cpu) == 0.0);
    const auto pc = cpu->named_parameters(), pd = dev->named_parameters();
    REQUIRE(pc.size() == pd.size());
    for (size_t k = 0; k < pc.size(); ++k) {
      CAPTURE(pc[k].first);
      CHECK(pd[k].second.grad().device() == kTestDevice);
      CHECK(testing::max_abs_diff(pd[k].second.grad(), pc[k].second.grad()) == 0.0);
    }
  }
}
