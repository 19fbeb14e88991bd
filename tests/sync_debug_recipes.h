// What tests/test_sync_debug.cpp (the test device) and
// tests/test_cuda_sync_debug.cpp (a CUDA device) check alike: issue 14's
// promise that a training step makes the host wait nowhere (forward, loss,
// backward, optimizer step, gradient clipping, lr schedule), checked by
// running whole steps with the sync debug mode at "error" on `device`.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "minidl/core/sync_debug.h"
#include "minidl/minidl.h"
#include "tests/test_util.h"

namespace minidl::testing {

// Restores "default" however a case ends.
struct SyncDebugScope {
  explicit SyncDebugScope(const std::string& mode) { cuda::set_sync_debug_mode(mode); }
  ~SyncDebugScope() { cuda::set_sync_debug_mode(0); }
};

inline int64_t syncs_of(const std::function<void()>& f) {
  const int64_t before = synchronizing_operations();
  f();
  return synchronizing_operations() - before;
}

inline void check_training_steps_make_no_sync(Device device) {
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
    model->to(device);
    model->train();
    const std::vector<Tensor> params = model->parameters();
    auto opt = r.make(params);
    optim::StepLR schedule(*opt, 2, 0.5);
    const Tensor x = randn({4, 3, 32, 32}).to(device);
    const Tensor y = randint(0, 10, {4}).to(device);
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

}  // namespace minidl::testing
