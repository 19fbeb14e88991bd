// Random arguments for one parameter's SGD or Adam step, as the multi-tensor
// tests (tests/test_cuda_multi_tensor*.cpp) build them for each tensor size.
#pragma once

#include <cmath>

#include "minidl/minidl.h"
#include "minidl/ops/fused_optim.h"

namespace minidl::testing {

// lr 0.1, weight decay 1e-2, dampening 0.25 (0 with nesterov); a momentum
// buffer of random values where momentum != 0.
inline SgdStepArgs random_sgd_step(int64_t n, DType dt, double momentum, bool nesterov, bool first_step) {
  SgdStepArgs a;
  a.param = randn({n}, dt);
  a.grad = randn({n}, dt);
  if (momentum != 0.0) a.momentum_buffer = randn({n}, dt);
  a.first_step = first_step;
  a.lr = 0.1;
  a.momentum = momentum;
  a.dampening = nesterov ? 0.0 : 0.25;
  a.weight_decay = 1e-2;
  a.nesterov = nesterov;
  return a;
}

// Betas (0.9, 0.999), eps 1e-8, weight decay 0.05, the bias corrections of
// step t; random moments (and a running max with amsgrad).
inline AdamStepArgs random_adam_step(int64_t n, DType dt, bool decoupled, bool amsgrad, double t, double lr = 1e-3) {
  AdamStepArgs a;
  a.param = randn({n}, dt);
  a.grad = randn({n}, dt);
  a.exp_avg = randn({n}, dt);
  a.exp_avg_sq = rand({n}, dt);
  if (amsgrad) a.max_exp_avg_sq = rand({n}, dt);
  a.lr = lr;
  a.beta1 = 0.9;
  a.beta2 = 0.999;
  a.eps = 1e-8;
  a.weight_decay = 0.05;
  a.decoupled_weight_decay = decoupled;
  a.step_size = a.lr / (1.0 - std::pow(a.beta1, t));
  a.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(a.beta2, t));
  return a;
}

}  // namespace minidl::testing
