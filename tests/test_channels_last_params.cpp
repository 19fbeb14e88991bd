// Channels-last parameters (nn::Module::to(MemoryFormat), PyTorch's
// model.to(memory_format=torch.channels_last)): the 4-D weights change
// layout, nothing else does; training with SGD (momentum, nesterov, weight
// decay), Adam (amsgrad) and AdamW follows the NCHW model's parameters to
// rounding in float64, with gradients and optimizer state kept in each
// parameter's layout; optimizer checkpoints move between an NCHW and a
// channels-last model; clip_grad_norm_; to(device) keeps the layout; the test
// device makes no CPU tensor.
#include <memory>
#include <string>
#include <vector>

#include "minidl/core/test_device.h"
#include "minidl/minidl.h"
#include "minidl/ops/fused_optim.h"
#include "tests/device_test_util.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

// A CIFAR ResNet-18 at 1/8 width (3x3 and 1x1 convs, BatchNorm, linear) in float64 on `device`.
std::shared_ptr<nn::Module> make_model(Device device, bool channels_last) {
  manual_seed(3);
  auto model = models::create_model("resnet18", models::ModelOptions().width(0.125));
  model->to(kFloat64);
  model->to(device);
  if (channels_last) model->to(kCL);
  return model;
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// `steps` training steps on random batches; the input is channels-last when the model is.
void train(nn::Module& model, optim::Optimizer& opt, bool channels_last, int steps, uint64_t seed) {
  const Device device = model.parameters()[0].device();
  manual_seed(seed);
  for (int s = 0; s < steps; ++s) {
    Tensor x = randn({4, 3, 8, 8}, kFloat64).to(device);
    if (channels_last) x = x.contiguous(kCL);
    const Tensor y = randint(0, 10, {4}).to(device);
    opt.zero_grad();
    cross_entropy(model.forward(x), y).backward();
    optim::clip_grad_norm_(model.parameters(), 5.0);
    opt.step();
  }
}

void check_same_parameters(nn::Module& a, nn::Module& b, double tol) {
  const std::vector<Tensor> pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO("parameter ", i, " ", shape_str(pa[i].shape()), ", max |diff| ",
         minidl::testing::max_abs_diff(pa[i].to(kCPU), pb[i].to(kCPU)));
    CHECK(minidl::testing::allclose(pa[i].to(kCPU), pb[i].to(kCPU), tol, tol));
  }
}

// Every 4-D parameter, its gradient and its optimizer state channels-last (1x1
// filters are both layouts at once).
void check_channels_last_state(nn::Module& model, optim::Optimizer& opt) {
  for (const Tensor& p : model.parameters()) {
    if (p.dim() != 4) continue;
    INFO(shape_str(p.shape()), " strides ", shape_str(p.strides()));
    CHECK(p.is_contiguous(kCL));
    CHECK(p.grad().is_contiguous(kCL));
    for (const auto& [name, t] : opt.state(p)) {
      INFO(name);
      if (t.dim() == 4) CHECK(t.is_contiguous(kCL));
    }
  }
}

const std::vector<std::pair<std::string, MakeOptimizer>>& optimizers() {
  static const std::vector<std::pair<std::string, MakeOptimizer>> list = {
      {"SGD nesterov + weight decay",
       [](std::vector<Tensor> ps) { return std::make_unique<optim::SGD>(ps, 0.05, 0.9, 0.0, 5e-4, true); }},
      {"Adam amsgrad",
       [](std::vector<Tensor> ps) {
         return std::make_unique<optim::Adam>(ps, 0.01, std::pair{0.9, 0.99}, 1e-8, 1e-2, true);
       }},
      {"AdamW", [](std::vector<Tensor> ps) {
         return std::make_unique<optim::AdamW>(ps, 0.01, std::pair{0.9, 0.999}, 1e-8, 0.05, false);
       }}};
  return list;
}

}  // namespace

TEST_CASE("Module::to(ChannelsLast) lays out the 4-D weights NHWC and nothing else; to(Contiguous) back") {
  auto model = make_model(kCPU, false);
  const nn::NamedTensors before = model->state_dict();
  model->to(kCL);
  int converted = 0;
  for (const auto& [name, t] : model->named_parameters()) {
    INFO(name);
    if (t.dim() == 4) {
      CHECK(t.is_contiguous(kCL));
      converted += t.size(2) > 1 ? 1 : 0;  // 1x1 filters were already both
      CHECK_FALSE((t.size(2) > 1 && t.is_contiguous()));
    } else {
      CHECK(t.is_contiguous());
    }
  }
  CHECK(converted == 17);  // the 3x3 convs of ResNet-18
  const nn::NamedTensors after = model->state_dict();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) CHECK(minidl::testing::allclose(after[i].second, before[i].second, 0, 0));
  model->to(MemoryFormat::Contiguous);
  for (const Tensor& t : model->parameters()) CHECK(t.is_contiguous());
  CHECK_THROWS_WITH_AS(model->to(MemoryFormat::Preserve), doctest::Contains("torch.preserve_format"), Error);
}

TEST_CASE("training a channels-last model follows the NCHW model (float64), state in the parameters' layout") {
  for (const auto& [name, make] : optimizers()) {
    INFO(name);
    auto nchw = make_model(kCPU, false), cl = make_model(kCPU, true);
    auto opt_nchw = make(nchw->parameters()), opt_cl = make(cl->parameters());
    train(*nchw, *opt_nchw, false, 3, 9);
    train(*cl, *opt_cl, true, 3, 9);
    check_same_parameters(*nchw, *cl, 1e-8);  // Adam divides by sqrt(v): gradients ~0 amplify rounding
    check_channels_last_state(*cl, *opt_cl);
  }
}

TEST_CASE("optimizer checkpoints move between an NCHW and a channels-last model, resuming the same") {
  for (const auto& [name, make] : optimizers()) {
    INFO(name);
    // Reference: 4 steps NCHW in one go.
    auto ref = make_model(kCPU, false);
    auto opt_ref = make(ref->parameters());
    train(*ref, *opt_ref, false, 2, 21);
    train(*ref, *opt_ref, false, 2, 22);
    for (bool from_cl : {false, true}) {
      INFO((from_cl ? "channels-last -> NCHW" : "NCHW -> channels-last"));
      auto first = make_model(kCPU, from_cl);
      auto opt_first = make(first->parameters());
      train(*first, *opt_first, from_cl, 2, 21);
      auto second = make_model(kCPU, !from_cl);
      second->load_state_dict(first->state_dict());
      auto opt_second = make(second->parameters());
      opt_second->load_state_dict(opt_first->state_dict());
      train(*second, *opt_second, !from_cl, 2, 22);
      check_same_parameters(*ref, *second, 1e-8);
      if (!from_cl) check_channels_last_state(*second, *opt_second);  // loaded NCHW state converted
    }
  }
}

TEST_CASE("channels-last parameters on the test device: to(device) keeps the layout, no CPU tensor in a step") {
  register_test_device();
  const Device dev(DeviceType::Test, 0);
  auto cpu = make_model(kCPU, true), on_dev = make_model(kCPU, true);
  on_dev->to(dev);  // after to(ChannelsLast): stays channels-last
  for (const Tensor& p : on_dev->parameters())
    if (p.dim() == 4) CHECK(p.is_contiguous(kCL));
  auto opt_cpu = std::make_unique<optim::SGD>(cpu->parameters(), 0.05, 0.9, 0.0, 5e-4, true);
  auto opt_dev = std::make_unique<optim::SGD>(on_dev->parameters(), 0.05, 0.9, 0.0, 5e-4, true);
  train(*cpu, *opt_cpu, true, 1, 31);
  train(*on_dev, *opt_dev, true, 1, 31);  // the first step makes the momentum buffers
  const int64_t made = minidl::testing::cpu_storages_made([&] {
    Tensor x = randn({4, 3, 8, 8}, kFloat64).to(dev).contiguous(kCL);
    const Tensor y = randint(0, 10, {4}).to(dev);
    const int64_t before = minidl::testing::cpu_storages();
    opt_dev->zero_grad();
    cross_entropy(on_dev->forward(x), y).backward();
    opt_dev->step();
    CHECK(minidl::testing::cpu_storages() == before);
  });
  CHECK(made == 2);  // randn and randint on the host
  check_channels_last_state(*on_dev, *opt_dev);
}

TEST_CASE("the step kernels refuse a state whose layout differs from its parameter's") {
  Tensor p = randn({4, 3, 3, 3}).contiguous(kCL).requires_grad_(true);
  p.set_grad(randn({4, 3, 3, 3}).contiguous(kCL));
  SgdStepArgs a;
  a.param = p;
  a.grad = p.grad().contiguous();  // NCHW gradient for an NHWC parameter
  a.lr = 0.1;
  MultiStepArgs<SgdStepArgs> kind;
  kind.tensors.push_back(a);
  CHECK_THROWS_WITH_AS(sgd_multi_step_stub(kCPU)(kind), doctest::Contains("layout"), Error);
}

TEST_CASE("channels-last ConvTranspose2d and Conv2d weights under a GradScaler: the NCHW model's steps") {
  // A decoder piece (transposed conv, conv, BatchNorm), float64, scaled loss:
  // GradScaler's unscale reads channels-last gradients in place.
  auto make = [](bool channels_last) {
    manual_seed(41);
    nn::Sequential net(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(4, 6, 2).stride(2)),
                       nn::Conv2d(nn::Conv2dOptions(6, 5, 3).padding(1)), nn::BatchNorm2d(5), nn::ReLU());
    net->to(kFloat64);
    if (channels_last) net->to(kCL);
    return net.ptr();
  };
  auto nchw = make(false), cl = make(true);
  optim::SGD opt_nchw(nchw->parameters(), 0.1, 0.9), opt_cl(cl->parameters(), 0.1, 0.9);
  amp::GradScaler scale_nchw("cpu", 1024.0), scale_cl("cpu", 1024.0);
  for (int step = 0; step < 3; ++step) {
    manual_seed(50 + step);
    const Tensor x = randn({2, 4, 5, 5}, kFloat64);
    for (auto [model, opt, scaler, fmt] :
         {std::tuple{nchw.get(), &opt_nchw, &scale_nchw, MemoryFormat::Contiguous},
          std::tuple{cl.get(), &opt_cl, &scale_cl, kCL}}) {
      opt->zero_grad();
      scaler->scale(model->forward(x.contiguous(fmt)).pow(2.0).mean()).backward();
      scaler->step(*opt);
      scaler->update();
    }
  }
  check_same_parameters(*nchw, *cl, 1e-12);
  for (const Tensor& p : cl->parameters())
    if (p.dim() == 4) CHECK((p.is_contiguous(kCL) && p.grad().is_contiguous(kCL)));
}
