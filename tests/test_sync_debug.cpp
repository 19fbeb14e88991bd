// cuda::set_sync_debug_mode (core/sync_debug.h) on the test device: which
// operations make the host wait, and issue 14's promise that a training step
// makes none (forward, loss, backward, optimizer step, gradient clipping, lr
// schedule), checked by running whole steps with the mode at "error".
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "minidl/minidl.h"
#include "minidl/core/sync_debug.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

// Restores "default" however a case ends.
struct SyncDebugScope {
  explicit SyncDebugScope(const std::string& mode) { cuda::set_sync_debug_mode(mode); }
  ~SyncDebugScope() { cuda::set_sync_debug_mode(0); }
};

int64_t syncs_of(const std::function<void()>& f) {
  const int64_t before = synchronizing_operations();
  f();
  return synchronizing_operations() - before;
}

}  // namespace

TEST_CASE("sync debug mode: PyTorch's values, names and errors") {
  CHECK(cuda::get_sync_debug_mode() == 0);
  cuda::set_sync_debug_mode("warn");
  CHECK(cuda::get_sync_debug_mode() == 1);
  cuda::set_sync_debug_mode(2);
  CHECK(cuda::get_sync_debug_mode() == 2);
  cuda::set_sync_debug_mode("default");
  CHECK(cuda::get_sync_debug_mode() == 0);
  CHECK_THROWS_WITH_AS(cuda::set_sync_debug_mode("loud"), doctest::Contains("expected one of `default`, `warn`, `error`"),
                       Error);
  CHECK_THROWS_WITH_AS(cuda::set_sync_debug_mode(3), doctest::Contains("invalid value of debug_mode"), Error);
  CHECK(cuda::get_sync_debug_mode() == 0);
}

TEST_CASE("sync debug mode: blocking copies between host and device synchronize, the rest does not") {
  const Tensor d = randn({4, 3}).to(kTestDevice);
  // Each way the host reads a device tensor is one synchronizing copy.
  CHECK(syncs_of([&] { (void)d.sum().item<float>(); }) == 1);
  CHECK(syncs_of([&] { (void)d.to(kCPU); }) == 1);
  CHECK(syncs_of([&] { (void)d.to_vector<float>(); }) == 1);
  CHECK(syncs_of([&] { (void)empty({4, 3}).copy_(d); }) == 1);
  // Blocking copies to the device too; non_blocking ones and device work not.
  const Tensor h = randn({4, 3});
  CHECK(syncs_of([&] { (void)h.to(kTestDevice); }) == 1);
  CHECK(syncs_of([&] { (void)h.to(kTestDevice, /*non_blocking=*/true); }) == 0);
  CHECK(syncs_of([&] { (void)d.to(kCPU, /*non_blocking=*/true); }) == 0);
  CHECK(syncs_of([&] { (void)matmul(d, d.t()).relu().sum(); }) == 0);
  CHECK(syncs_of([&] { (void)d.to(Device(DeviceType::Test, 1)); }) == 0);  // device to device
  CHECK(syncs_of([&] { (void)h.sum().item<float>(); }) == 0);               // all on the CPU

  SyncDebugScope error("error");
  CHECK_THROWS_WITH_AS((void)d.sum().item<float>(),
                       doctest::Contains("called a synchronizing test:0 operation (a copy to host memory"), Error);
  CHECK_THROWS_WITH_AS((void)h.to(kTestDevice), doctest::Contains("a blocking copy from host memory"), Error);
  CHECK_NOTHROW((void)h.to(kTestDevice, /*non_blocking=*/true));
}

TEST_CASE("sync debug mode: a training step on the device makes the host wait nowhere") {
  struct Recipe {
    const char* name;
    const char* model;
    const char* norm;
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
  };
  const Recipe recipes[] = {
      {"smallnet, batchnorm, SGD nesterov", "smallnet", "batchnorm",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(std::move(p), 0.1, 0.9, 0.0, 5e-4, /*nesterov=*/true);
       }},
      {"resnet20, groupnorm, Adam amsgrad", "resnet20", "groupnorm",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::Adam>(std::move(p), 1e-3, std::make_pair(0.9, 0.999), 1e-8, 1e-4, true);
       }},
      {"smallnet, layernorm, AdamW", "smallnet", "layernorm",
       [](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(std::move(p), 1e-3); }},
  };
  for (const Recipe& r : recipes) {
    CAPTURE(r.name);
    manual_seed(3);
    auto model = models::create_model(r.model, models::ModelOptions().norm(r.norm).width(0.25));
    model->to(kTestDevice);
    model->train();
    const std::vector<Tensor> params = model->parameters();
    auto opt = r.make(params);
    optim::StepLR schedule(*opt, 2, 0.5);
    const Tensor x = randn({4, 3, 32, 32}).to(kTestDevice);
    const Tensor y = randint(0, 10, {4}).to(kTestDevice);
    Tensor loss;
    auto step = [&] {
      opt->zero_grad();
      loss = cross_entropy(model->forward(x), y);
      loss.backward();
      std::vector<Tensor> grads;
      for (const Tensor& p : params) grads.push_back(p.grad());
      optim::clip_grads_with_norm_(params, 1.0, optim::get_total_norm(grads));
      opt->step();
      schedule.step();
    };
    step();  // the first step creates the optimizer state
    {
      SyncDebugScope error("error");
      for (int i = 0; i < 3; ++i) CHECK_NOTHROW(step());
      // The logged loss is the one read, and the mode catches it.
      CHECK_THROWS_WITH_AS((void)loss.item<float>(), doctest::Contains("called a synchronizing"), Error);
    }
    CHECK(std::isfinite(loss.item<float>()));
    // The convenience form reads the norm back: one synchronization, as documented.
    CHECK(syncs_of([&] { (void)optim::clip_grad_norm_(params, 1.0); }) == 1);
  }
}
