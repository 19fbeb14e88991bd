// CPU bfloat16 autocast on a training step: a conv-BN-ReLU-pool-linear model
// against PyTorch's autocast result (tests/goldens/autocast_model.safetensors,
// scripts/make_autocast_goldens.py); the 16-bit CPU kernels (Float32Compute,
// ops/cpu/float32_compute.h) bit for bit against float32 computation rounded
// once; SmallNet and ResNet-20 steps; the same model on the test device
// without a CPU storage.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "minidl/core/test_device.h"
#include "tests/device_test_util.h"
#include "tests/test_util.h"

using namespace minidl;
using testing::allclose;

namespace {

// The fixture's model, functionally: parameters by name (float32 leaves).
struct Net {
  std::map<std::string, Tensor> p;
  Tensor running_mean, running_var;

  Tensor forward(const Tensor& x, std::map<std::string, Tensor>* acts = nullptr) const {
    const Tensor a = conv2d(x, p.at("conv.weight"), p.at("conv.bias"), Conv2dParams{.padding = {1, 1}});
    const Tensor b = batch_norm(a, running_mean, running_var, p.at("bn.weight"), p.at("bn.bias"), true);
    const Tensor r = relu(b);
    const Tensor q = max_pool2d(r, {2, 2});
    const Tensor logits = linear(flatten(q, 1), p.at("fc.weight"), p.at("fc.bias"));
    if (acts != nullptr) *acts = {{"conv", a}, {"bn", b}, {"relu", r}, {"pool", q}, {"logits", logits}};
    return logits;
  }
};

Net load_net(const SafetensorsFile& f, Device device) {
  Net net;
  for (const char* name : {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias"})
    net.p[name] = f.at(name).to(device).clone().detach().requires_grad_();
  net.running_mean = f.at("bn.running_mean").to(device).clone();
  net.running_var = f.at("bn.running_var").to(device).clone();
  return net;
}

// Compares with bfloat16 tolerances: rtol 1.6e-2 (about 2 bf16 ulps) plus an
// absolute part scaled to the tensor's magnitude.
void check_close(const Tensor& got, const Tensor& want, const char* what) {
  INFO(std::string(what), ": max |diff| ", testing::max_abs_diff(got.to(kFloat32), want.to(kFloat32)));
  const double scale = std::max(1e-3, want.to(kFloat32).abs().max().item<double>());
  CHECK(allclose(got.to(kFloat32), want.to(kFloat32), 1.6e-2, 1.6e-2 * scale));
}

}  // namespace

TEST_CASE("autocast model: conv-BN-ReLU-pool-linear under CPU bfloat16 matches PyTorch's autocast step") {
  const SafetensorsFile f = load_safetensors(std::string(MINIDL_GOLDENS_DIR) + "/autocast_model.safetensors");
  const nlohmann::json meta = nlohmann::json::parse(f.metadata.at("info"));
  Net net = load_net(f, kCPU);
  std::map<std::string, Tensor> acts;
  Tensor loss;
  {
    amp::autocast guard(DeviceType::CPU, kBFloat16);
    const Tensor logits = net.forward(f.at("x"), &acts);
    loss = cross_entropy(logits, f.at("labels"));
  }
  for (const char* name : {"conv", "bn", "relu", "pool", "logits"}) {
    INFO(name);
    CHECK(std::string(dtype_name(acts.at(name).dtype())) == meta.at(std::string(name) + "_dtype").get<std::string>());
  }
  CHECK(std::string(dtype_name(loss.dtype())) == meta.at("loss_dtype").get<std::string>());
  check_close(acts.at("logits"), f.at("logits"), "logits");
  check_close(loss, f.at("loss"), "loss");
  loss.backward();
  for (const auto& [name, param] : net.p) {
    INFO(name);
    REQUIRE(param.grad().defined());
    CHECK(std::string(dtype_name(param.grad().dtype())) == meta.at("grad_dtype." + name).get<std::string>());
    check_close(param.grad(), f.at("grad." + name), name.c_str());
  }
  CHECK(net.running_mean.dtype() == kFloat32);  // statistics stay float32
  check_close(net.running_mean, f.at("after.bn.running_mean"), "running_mean");
  check_close(net.running_var, f.at("after.bn.running_var"), "running_var");
}

TEST_CASE("autocast model: the same step on the test device makes no CPU storage and the same numbers") {
  const SafetensorsFile f = load_safetensors(std::string(MINIDL_GOLDENS_DIR) + "/autocast_model.safetensors");
  auto step = [&](Device device) {
    Net net = load_net(f, device);
    const Tensor x = f.at("x").to(device), labels = f.at("labels").to(device);
    std::map<std::string, Tensor> out;
    const int64_t cpu_made = testing::cpu_storages_made([&] {
      Tensor loss;
      {
        amp::autocast guard(device, kBFloat16);
        loss = cross_entropy(net.forward(x), labels);
      }
      loss.backward();
      out["loss"] = loss;
      for (const auto& [name, param] : net.p) out["grad." + name] = param.grad();
      out["running_var"] = net.running_var;
    });
    if (device.is_test()) CHECK(cpu_made == 0);
    return out;
  };
  const auto cpu = step(kCPU);
  const auto test = step(kTestDevice);
  for (const auto& [name, t] : cpu) {
    INFO(name);
    CHECK(test.at(name).device() == kTestDevice);
    CHECK(test.at(name).dtype() == t.dtype());
    CHECK(testing::max_abs_diff(test.at(name).to(kCPU), t) == 0.0);
  }
}

// One op on bfloat16 inputs gives exactly what float32 computation on the
// same (exactly widened) values gives, rounded once; so does its backward.
TEST_CASE("Float32Compute: bfloat16 ops and their backward equal float32 computation rounded once") {
  // conv2d, linear and matmul take the AVX512-BF16 dot products where the CPU
  // has them (tests/test_bf16_ops.cpp); this case is about Float32Compute.
  const testing::NoBf16Dot dot_off;
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  using V = const std::vector<Tensor>&;
  struct Case {
    const char* name;
    std::vector<Shape> shapes;
    Fn f;
    // Its backward reads the saved (bfloat16-rounded) output, so it is only
    // close to the float32 one (as in PyTorch).
    bool backward_reads_output = false;
  };
  const std::vector<Case> cases = {
      {"conv2d", {{2, 3, 7, 7}, {4, 3, 3, 3}, {4}}, [](V a) { return conv2d(a[0], a[1], a[2], Conv2dParams{.padding = {1, 1}}); }},
      {"conv3d", {{1, 2, 4, 5, 5}, {3, 2, 2, 3, 3}, {3}}, [](V a) { return conv3d(a[0], a[1], a[2]); }},
      {"linear", {{5, 6}, {3, 6}, {3}}, [](V a) { return linear(a[0], a[1], a[2]); }},
      {"matmul (batched, broadcast)", {{2, 3, 4}, {4, 5}}, [](V a) { return matmul(a[0], a[1]); }},
      {"relu", {{4, 5}}, [](V a) { return relu(a[0]); }},
      {"gelu", {{4, 5}}, [](V a) { return gelu(a[0]); }},
      {"add (broadcast)", {{3, 4}, {4}}, [](V a) { return add(a[0], a[1]); }},
      {"mul", {{3, 4}, {3, 4}}, [](V a) { return mul(a[0], a[1]); }},
      {"mul scalar", {{3, 4}}, [](V a) { return mul(a[0], 0.3); }},
      {"max_pool2d", {{2, 3, 6, 6}}, [](V a) { return max_pool2d(a[0], {2, 2}); }},
      {"avg_pool2d", {{2, 3, 6, 6}}, [](V a) { return avg_pool2d(a[0], {3, 3}, {2, 2}, {1, 1}); }},
      {"adaptive_avg_pool2d", {{2, 3, 5, 5}}, [](V a) { return adaptive_avg_pool2d(a[0], {1, 1}); }},
      {"softmax", {{3, 7}}, [](V a) { return softmax(a[0], 1); }, true},
      {"sum over dims", {{3, 4, 5}}, [](V a) { return sum(a[0], {0, 2}); }},
      {"mean", {{3, 4}}, [](V a) { return mean(a[0]); }},
      {"cat + transpose (views)", {{3, 4}, {2, 4}}, [](V a) { return cat({a[0], a[1]}).transpose(0, 1); }},
      {"batch_norm (bf16 input, float32 params)", {{4, 3, 2, 2}},
       [](V a) {
         Tensor w = full({3}, 1.5), b = full({3}, -0.25);
         return batch_norm(a[0], zeros({3}), ones({3}), w, b, true);
       }},
      {"group_norm", {{2, 4, 3}}, [](V a) { return group_norm(a[0], 2); }},
      {"relu of a narrowed, transposed view", {{6, 5}},
       [](V a) { return relu(narrow(a[0], 0, 2, 3).transpose(0, 1)); }},
      {"mul by an expanded view", {{3, 4}, {3, 1}}, [](V a) { return mul(a[0], a[1].expand({3, 4})); }},
      {"mse_loss", {{3, 4}, {3, 4}}, [](V a) { return mse_loss(a[0], a[1]); }},
      // Saves log-sum-exp in the input's dtype for backward.
      {"cross_entropy", {{4, 5}},
       [](V a) { return cross_entropy(a[0], tensor(std::vector<int64_t>{0, 4, 2, 2})); }, true},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.name));
    manual_seed(3);
    std::vector<Tensor> low, wide;
    for (const Shape& s : c.shapes) {
      low.push_back(randn(s).to(kBFloat16).requires_grad_());
      wide.push_back(low.back().detach().to(kFloat32).requires_grad_());
    }
    const Tensor y_low = c.f(low), y_wide = c.f(wide);
    REQUIRE(y_low.dtype() == kBFloat16);
    CHECK(testing::max_abs_diff(y_low.to(kFloat32), y_wide.to(kBFloat16).to(kFloat32)) == 0.0);
    // Backward from a bfloat16-exact gradient.
    const Tensor g = randn(y_low.shape()).to(kBFloat16);
    y_low.backward(g);
    y_wide.backward(g.to(kFloat32));
    for (size_t i = 0; i < low.size(); ++i) {
      INFO("input ", i);
      REQUIRE(low[i].grad().defined());
      CHECK(low[i].grad().dtype() == kBFloat16);
      const Tensor want = wide[i].grad().to(kBFloat16).to(kFloat32);
      if (c.backward_reads_output)
        CHECK(allclose(low[i].grad().to(kFloat32), want, 1.6e-2, 1e-2));
      else
        CHECK(testing::max_abs_diff(low[i].grad().to(kFloat32), want) == 0.0);
    }
  }
}

TEST_CASE("Float32Compute: in-place ops on a view of a bfloat16 tensor write only the view") {
  const Tensor base = arange(12.0).reshape({3, 4}).to(kBFloat16);
  Tensor row = select(base, 0, 1);  // [4, 5, 6, 7]
  row.mul_(0.5);
  row.add_(ones({4}, kBFloat16));
  CHECK(base.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 3, 3.5, 4, 4.5, 8, 9, 10, 11});
}

TEST_CASE("Float32Compute: dropout on bfloat16 keeps zeros and scales the kept values") {
  manual_seed(5);
  const Tensor x = randn({64}).to(kBFloat16).requires_grad_();
  const Tensor y = dropout(x, 0.5, true);
  CHECK(y.dtype() == kBFloat16);
  y.backward(ones({64}, kBFloat16));
  const auto xv = x.to_vector<float>(), yv = y.to_vector<float>(), gv = x.grad().to_vector<float>();
  int kept = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (gv[i] == 0.0f) {
      CHECK(yv[i] == 0.0f);
    } else {
      CHECK(gv[i] == 2.0f);
      CHECK(yv[i] == static_cast<float>(BFloat16(xv[i] * 2.0f)));
      ++kept;
    }
  }
  CHECK(kept > 16);
  CHECK(kept < 48);
}

TEST_CASE("autocast model: SmallNet and ResNet-20 train a step under CPU bfloat16 autocast") {
  for (const char* name : {"smallnet", "resnet20"}) {
    INFO(name);
    manual_seed(7);
    auto model = models::create_model(name, models::ModelOptions().width(0.25));
    const Tensor x = randn({2, 3, 32, 32});
    const Tensor labels = tensor(std::vector<int64_t>{1, 7});
    Tensor loss32 = cross_entropy(model->forward(x), labels);
    Tensor logits, loss;
    {
      amp::autocast guard(DeviceType::CPU, kBFloat16);
      logits = model->forward(x);
      loss = cross_entropy(logits, labels);
    }
    CHECK(logits.dtype() == kBFloat16);
    CHECK(loss.dtype() == kFloat32);
    CHECK(std::abs(loss.item() - loss32.item()) < 0.05 * std::abs(loss32.item()) + 0.05);
    loss.backward();
    for (const auto& [pname, p] : model->named_parameters()) {
      INFO(pname);
      REQUIRE(p.grad().defined());
      CHECK(p.grad().dtype() == kFloat32);
      CHECK(std::isfinite(p.grad().abs().sum().item()));
    }
  }
}
