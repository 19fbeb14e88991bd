// Optimizers and clip_grad_norm_ on the test device (core/test_device.h):
// the same kernels as on the CPU, so the results must be equal bit for bit;
// the state must live on the parameters' device ("step" excepted, a host
// counter); and a step must create no CPU storage, which proves that nothing
// made a host copy of a device tensor or a host tensor for a device kernel.
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <unistd.h>

#include "minidl/ops/fused_optim.h"
#include "tests/device_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::optim;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

using minidl::testing::cpu_storages;

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector<double>() == b.to_vector<double>();
}

// The same parameters on the CPU and on the test device. The last one is big
// enough for the kernels' OpenMP path.
struct Twin {
  std::vector<Tensor> host, device;
};
Twin twin_params(DType dtype) {
  Twin t;
  for (const Shape& s : {Shape{5, 3}, Shape{3}, Shape{70000}}) {
    Tensor v = randn(s, dtype);
    t.host.push_back(v.clone().requires_grad_());
    t.device.push_back(v.to(kTestDevice).requires_grad_());
  }
  return t;
}

// Gives both twins the same fresh random gradients.
void set_twin_grads(Twin& t) {
  for (size_t i = 0; i < t.host.size(); ++i) {
    Tensor g = randn(t.host[i].shape(), t.host[i].dtype());
    t.host[i].set_grad(g);
    t.device[i].set_grad(g.to(kTestDevice));
  }
}

// Three steps on both devices. After each: parameters and state equal bit for
// bit, state tensors on the test device ("step" on the CPU), and the device
// step created `first_step_cpu` CPU storages on its first step, none later.
void check_twin_steps(const MakeOptimizer& make, DType dtype, int64_t first_step_cpu) {
  manual_seed(11);
  Twin t = twin_params(dtype);
  auto host_opt = make(t.host), dev_opt = make(t.device);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    set_twin_grads(t);
    host_opt->step();
    const int64_t before = cpu_storages();
    dev_opt->step();
    CHECK(cpu_storages() - before == (step == 0 ? first_step_cpu : 0));
    for (size_t i = 0; i < t.host.size(); ++i) {
      CAPTURE(i);
      CHECK(t.device[i].device() == kTestDevice);
      CHECK(same_values(t.host[i], t.device[i]));
      const Optimizer::ParamState& hs = host_opt->state(t.host[i]);
      const Optimizer::ParamState& ds = dev_opt->state(t.device[i]);
      REQUIRE(hs.size() == ds.size());
      for (const auto& [name, value] : ds) {
        CAPTURE(name);
        CHECK(value.device() == (name == "step" ? kCPU : kTestDevice));
        CHECK(same_values(hs.at(name), value));
      }
    }
  }
}

std::string temp_path(const std::string& stem) {
  return "/tmp/minidl_test_optim_device_" + stem + "_" + std::to_string(getpid()) + ".safetensors";
}

}  // namespace

TEST_CASE("SGD on the test device equals the CPU bit for bit, state on the device, no CPU tensor") {
  struct Case {
    const char* name;
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Case& c : {Case{"plain", 0.0, 0.0, 0.0, false}, Case{"momentum", 0.9, 0.0, 0.0, false},
                        Case{"momentum+dampening+wd", 0.9, 0.1, 1e-2, false},
                        Case{"nesterov+wd", 0.9, 0.0, 5e-4, true}}) {
    for (DType dtype : {kFloat64, kFloat32}) {
      CAPTURE(c.name);
      CAPTURE(dtype_name(dtype));
      // The momentum buffer is created on the device: even the first step makes no CPU storage.
      check_twin_steps(
          [&](std::vector<Tensor> ps) {
            return std::make_unique<SGD>(ps, 0.05, c.momentum, c.dampening, c.weight_decay, c.nesterov);
          },
          dtype, 0);
    }
  }
}

TEST_CASE("Adam and AdamW on the test device equal the CPU bit for bit, moments on the device") {
  for (bool amsgrad : {false, true}) {
    for (DType dtype : {kFloat64, kFloat32}) {
      CAPTURE(amsgrad);
      CAPTURE(dtype_name(dtype));
      // The first step creates the three "step" counters, which stay on the host; nothing else.
      check_twin_steps(
          [&](std::vector<Tensor> ps) {
            return std::make_unique<Adam>(ps, 0.01, std::pair{0.9, 0.99}, 1e-8, 1e-2, amsgrad);
          },
          dtype, 3);
      check_twin_steps(
          [&](std::vector<Tensor> ps) {
            return std::make_unique<AdamW>(ps, 0.01, std::pair{0.8, 0.999}, 1e-6, 0.1, amsgrad);
          },
          dtype, 3);
    }
  }
}

TEST_CASE("optimizer state_dict of device parameters: saved through the host, loaded onto the device") {
  manual_seed(5);
  Twin t = twin_params(kFloat64);
  auto make = [](std::vector<Tensor> ps) {
    return std::make_unique<AdamW>(ps, 0.01, std::pair{0.9, 0.999}, 1e-8, 0.05, /*amsgrad=*/true);
  };
  auto dev_opt = make(t.device);
  for (int s = 0; s < 2; ++s) {
    set_twin_grads(t);
    dev_opt->step();
  }
  OptimizerStateDict sd = dev_opt->state_dict();
  for (const auto& [key, value] : sd.tensors) {
    CAPTURE(key);
    const bool step = key.size() > 5 && key.compare(key.size() - 5, 5, ".step") == 0;
    CHECK(value.device() == (step ? kCPU : kTestDevice));
  }
  const std::string path = temp_path("adamw");
  sd.save(path);

  // A fresh optimizer over copies of the device parameters loads the file
  // (host tensors) and gets its moments back on the device.
  std::vector<Tensor> copies;
  for (const Tensor& p : t.device) copies.push_back(p.detach().clone().requires_grad_());
  auto fresh = make(copies);
  fresh->load_state_dict(OptimizerStateDict::load(path));
  std::remove(path.c_str());
  for (const Tensor& p : copies)
    for (const auto& [name, value] : fresh->state(p)) {
      CAPTURE(name);
      CHECK(value.device() == (name == "step" ? kCPU : kTestDevice));
    }
  for (int s = 0; s < 2; ++s) {
    set_twin_grads(t);
    for (size_t i = 0; i < copies.size(); ++i) copies[i].set_grad(t.device[i].grad().clone());
    dev_opt->step();
    const int64_t before = cpu_storages();
    fresh->step();
    CHECK(cpu_storages() == before);
    for (size_t i = 0; i < copies.size(); ++i) CHECK(same_values(t.device[i], copies[i]));
  }
}

TEST_CASE("clip_grad_norm_ on the test device equals the CPU bit for bit; the Tensor form reads nothing back") {
  for (double norm_type : {2.0, 1.0, 3.0, double(INFINITY)}) {
    for (double max_norm : {0.5, 1e6}) {
      CAPTURE(norm_type);
      CAPTURE(max_norm);
      manual_seed(17);
      // Mixed dtypes, a parameter without a gradient, and a non-contiguous gradient.
      std::vector<Tensor> host, dev;
      for (auto [shape, dtype] : {std::pair{Shape{4, 3}, kFloat64}, std::pair{Shape{7}, kFloat32},
                                  std::pair{Shape{2}, kFloat64}, std::pair{Shape{3, 5}, kFloat64}}) {
        Tensor v = randn(shape, dtype);
        host.push_back(v.clone().requires_grad_());
        dev.push_back(v.to(kTestDevice).requires_grad_());
        if (shape == Shape{2}) continue;  // no gradient: skipped
        Tensor g = shape == Shape{3, 5} ? randn({5, 3}, dtype).t() : randn(shape, dtype);
        host.back().set_grad(g);
        dev.back().set_grad(g.to(kTestDevice).t().contiguous().t());  // non-contiguous on both sides
      }
      REQUIRE(!dev.back().grad().is_contiguous());
      const double want = clip_grad_norm_(host, max_norm, norm_type);

      std::vector<Tensor> grads;
      for (const Tensor& p : dev)
        if (p.grad().defined()) grads.push_back(p.grad());
      const int64_t before = cpu_storages();
      Tensor total = get_total_norm(grads, norm_type);
      clip_grads_with_norm_(dev, max_norm, total);
      CHECK(cpu_storages() == before);
      CHECK(total.device() == kTestDevice);
      CHECK(total.dtype() == kFloat64);
      CHECK(total.item<double>() == want);
      for (size_t i = 0; i < dev.size(); ++i) {
        CAPTURE(i);
        CHECK(dev[i].grad().defined() == host[i].grad().defined());
        if (dev[i].grad().defined()) {
          CHECK(dev[i].grad().device() == kTestDevice);
          CHECK(same_values(dev[i].grad(), host[i].grad()));
        }
      }
    }
  }
}

TEST_CASE("clip_grad_norm_ (double) on the test device, and its non-finite error") {
  Tensor a = zeros({2}, kFloat64).to(kTestDevice).requires_grad_();
  Tensor b = zeros({1}, kFloat64).to(kTestDevice).requires_grad_();
  a.set_grad(tensor({3.0, -4.0}, {2}, kFloat64).to(kTestDevice));
  b.set_grad(tensor({12.0}, {1}, kFloat64).to(kTestDevice));
  CHECK(clip_grad_norm_({a, b}, 6.5) == 13.0);
  CHECK(a.grad().device() == kTestDevice);
  const double coef = 6.5 / (13.0 + 1e-6);
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3.0 * coef, -4.0 * coef});

  b.grad().fill_(NAN);
  const std::vector<double> kept = a.grad().to_vector<double>();
  CHECK_THROWS_CONTAINS(clip_grad_norm_({a, b}, 1.0, 2.0, true),
                        "The total norm of order 2 for gradients from `parameters` is non-finite");
  CHECK(a.grad().to_vector<double>() == kept);  // refused before scaling
  CHECK(std::isnan(clip_grad_norm_({a, b}, 1.0)));
  CHECK(std::isnan(a.grad().to_vector<double>()[0]));
}

TEST_CASE("get_total_norm over tensors on two devices sends the norms to the first one") {
  Tensor x = tensor({3.0, 4.0}, {2}, kFloat64).to(kTestDevice);
  Tensor y = tensor({12.0}, {1}, kFloat64);
  Tensor total = get_total_norm({x, y});
  CHECK(total.device() == kTestDevice);
  CHECK(total.item<double>() == 13.0);
  CHECK(get_total_norm({y, x}).device() == kCPU);
  CHECK(get_total_norm({}).item<double>() == 0.0);
}

// ---- capturable (lr and Adam's steps in device memory, for CUDA graphs) ----

namespace {

// Four steps with a changing lr: the capturable optimizer on the test device
// equals the plain one on the CPU bit for bit; its "step" lives on the device.
void check_capturable_steps(const MakeOptimizer& plain, const MakeOptimizer& capturable, DType dtype) {
  manual_seed(12);
  Twin t = twin_params(dtype);
  auto host_opt = plain(t.host), dev_opt = capturable(t.device);
  const double lrs[] = {0.05, 0.02, 0.035, 0.01};
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    set_twin_grads(t);
    host_opt->param_groups()[0].set_lr(lrs[step]);
    dev_opt->param_groups()[0].set_lr(lrs[step]);  // step() writes it to the device lr
    host_opt->step();
    const int64_t before = cpu_storages();
    dev_opt->step();
    if (step > 0) CHECK(cpu_storages() == before);  // the lr goes by a fill kernel, the step is counted there
    for (size_t i = 0; i < t.host.size(); ++i) {
      CAPTURE(i);
      CHECK(same_values(t.host[i], t.device[i]));
      for (const auto& [name, value] : dev_opt->state(t.device[i])) {
        CAPTURE(name);
        CHECK(value.device() == kTestDevice);
        CHECK(same_values(host_opt->state(t.host[i]).at(name), value));
      }
    }
  }
}

template <class Options>
Options capturable_options(Options o) {
  o.capturable = true;
  return o;
}

}  // namespace

TEST_CASE("capturable SGD, Adam and AdamW read lr and step on the device and equal the plain ones") {
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dtype));
    SGDOptions sgd(0.05);
    sgd.momentum = 0.9;
    sgd.weight_decay = 5e-4;
    check_capturable_steps([&](std::vector<Tensor> ps) { return std::make_unique<SGD>(std::vector<ParamGroup>{ps}, sgd); },
                           [&](std::vector<Tensor> ps) {
                             return std::make_unique<SGD>(std::vector<ParamGroup>{ps}, capturable_options(sgd));
                           },
                           dtype);
    for (bool amsgrad : {false, true}) {
      CAPTURE(amsgrad);
      AdamOptions adam(0.01);
      adam.beta2 = 0.99;
      adam.weight_decay = 1e-2;
      adam.amsgrad = amsgrad;
      check_capturable_steps(
          [&](std::vector<Tensor> ps) { return std::make_unique<Adam>(std::vector<ParamGroup>{ps}, adam); },
          [&](std::vector<Tensor> ps) {
            return std::make_unique<Adam>(std::vector<ParamGroup>{ps}, capturable_options(adam));
          },
          dtype);
      check_capturable_steps(
          [&](std::vector<Tensor> ps) { return std::make_unique<AdamW>(std::vector<ParamGroup>{ps}, adam); },
          [&](std::vector<Tensor> ps) {
            return std::make_unique<AdamW>(std::vector<ParamGroup>{ps}, capturable_options(adam));
          },
          dtype);
    }
  }
}

TEST_CASE("capturable multi-tensor kernels take the lr and step from their tensors, not the host fields") {
  manual_seed(13);
  const Tensor p0 = randn({7}, kFloat32), g = randn({7}, kFloat32), m0 = randn({7}, kFloat32);
  const Tensor v0 = randn({7}, kFloat32).abs();
  SUBCASE("SGD") {
    SgdStepArgs plain;
    plain.param = p0.clone();
    plain.grad = g;
    plain.momentum_buffer = m0.clone();
    plain.lr = 0.03;
    plain.momentum = 0.9;
    SgdStepArgs cap = plain;
    cap.param = p0.to(kTestDevice);
    cap.grad = g.to(kTestDevice);
    cap.momentum_buffer = m0.to(kTestDevice);
    cap.lr = 123.0;  // ignored: lr_tensor holds the lr
    cap.lr_tensor = full({}, 0.03, TensorOptions(kFloat64).device(kTestDevice));
    sgd_multi_step_stub(kCPU)(MultiStepArgs<SgdStepArgs>{{plain}});
    sgd_multi_step_stub(kTestDevice)(MultiStepArgs<SgdStepArgs>{{cap}});
    CHECK(same_values(plain.param, cap.param));
    CHECK(same_values(plain.momentum_buffer, cap.momentum_buffer));
  }
  SUBCASE("AdamW at step 3") {
    AdamStepArgs plain;
    plain.param = p0.clone();
    plain.grad = g;
    plain.exp_avg = m0.clone();
    plain.exp_avg_sq = v0.clone();
    plain.lr = 0.01;
    plain.beta1 = 0.9;
    plain.beta2 = 0.999;
    plain.eps = 1e-8;
    plain.weight_decay = 0.1;
    plain.decoupled_weight_decay = true;
    plain.step_size = 0.01 / (1.0 - std::pow(0.9, 3.0));
    plain.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(0.999, 3.0));
    AdamStepArgs cap = plain;
    cap.param = p0.to(kTestDevice);
    cap.grad = g.to(kTestDevice);
    cap.exp_avg = m0.to(kTestDevice);
    cap.exp_avg_sq = v0.to(kTestDevice);
    cap.lr = cap.step_size = cap.bias_correction2_sqrt = 123.0;  // ignored
    cap.lr_tensor = full({}, 0.01, TensorOptions(kFloat64).device(kTestDevice));
    cap.step_tensor = full({}, 2.0, TensorOptions(kFloat32).device(kTestDevice));  // the kernel counts it to 3
    adam_multi_step_stub(kCPU)(MultiStepArgs<AdamStepArgs>{{plain}});
    adam_multi_step_stub(kTestDevice)(MultiStepArgs<AdamStepArgs>{{cap}});
    CHECK(cap.step_tensor.to(kCPU).item<float>() == 3.0f);
    CHECK(same_values(plain.param, cap.param));
    CHECK(same_values(plain.exp_avg_sq, cap.exp_avg_sq));
    // Only one of the pair is a contract violation.
    cap.step_tensor = Tensor();
    CHECK_THROWS_WITH_AS(adam_multi_step_stub(kTestDevice)(MultiStepArgs<AdamStepArgs>{{cap}}),
                         doctest::Contains("lr_tensor and step_tensor together"), Error);
  }
}

TEST_CASE("capturable: state_dict records it; a loaded CPU \"step\" moves to the device at the next step") {
  manual_seed(14);
  Twin t = twin_params(kFloat32);
  AdamOptions o(0.01);
  o.capturable = true;
  Adam a(std::vector<ParamGroup>{t.device}, o);
  set_twin_grads(t);
  a.step();
  const OptimizerStateDict sd = a.state_dict();
  CHECK(sd.metadata.at("param_groups").find("\"capturable\":true") != std::string::npos);
  Adam b(std::vector<ParamGroup>{t.device}, AdamOptions(0.5));
  b.load_state_dict(sd);
  CHECK(b.param_groups()[0].options->capturable);
  CHECK(b.state(t.device[0]).at("step").device() == kCPU);  // as loaded: "step" on the host
  b.step();
  CHECK(b.state(t.device[0]).at("step").device() == kTestDevice);
  CHECK(b.state(t.device[0]).at("step").to(kCPU).item<float>() == 2.0f);
}
