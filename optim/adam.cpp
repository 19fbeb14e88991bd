// Adam / AdamW, as torch.optim.Adam (single-tensor path), per element with g
// the gradient and t the step (counted from 1):
//   AdamW: p = p * (1 - lr * weight_decay)      Adam: g = g + weight_decay * p
//   m = m + (1 - beta1) * (g - m)               (lerp towards g)
//   v = beta2 * v + (1 - beta2) * g * g
//   v_max = max(v_max, v)                       (amsgrad; v_max replaces v below)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p = p - lr / (1 - beta1^t) * m / denom
// State: "step" (0-d float32), "exp_avg", "exp_avg_sq", "max_exp_avg_sq"
// (amsgrad); the moments on p's device, "step" on the CPU, where the bias
// corrections are computed, except with capturable: then "step" lives on p's
// device and the kernel counts it and computes the bias corrections there
// (and reads the lr from the optimizer's device lr tensor), PyTorch's
// capturable=True. One adam_multi_step_stub call per (device, dtype)
// of a group's parameters (ops/fused_optim.h: a few launches on CUDA);
// overwrites p in place.
#include "minidl/optim/adam.h"

#include <cmath>

#include "minidl/ops/fused_optim.h"

namespace minidl::optim {

namespace {

void check_adam_options(const AdamOptions& o) {
  MINIDL_CHECK(o.lr >= 0.0, "Invalid learning rate: ", o.lr);
  MINIDL_CHECK(o.eps >= 0.0, "Invalid epsilon value: ", o.eps);
  MINIDL_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0, "Invalid beta parameter at index 0: ", o.beta1);
  MINIDL_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0, "Invalid beta parameter at index 1: ", o.beta2);
  MINIDL_CHECK(o.weight_decay >= 0.0, "Invalid weight_decay value: ", o.weight_decay);
}

AdamOptions make_adam_options(double lr, std::pair<double, double> betas, double eps, double weight_decay,
                              bool amsgrad) {
  AdamOptions o(lr);
  o.beta1 = betas.first;
  o.beta2 = betas.second;
  o.eps = eps;
  o.weight_decay = weight_decay;
  o.amsgrad = amsgrad;
  check_adam_options(o);
  return o;
}

}  // namespace

void AdamOptions::to_json(nlohmann::json& j) const {
  OptimizerOptions::to_json(j);
  j["betas"] = {beta1, beta2};
  j["eps"] = eps;
  j["amsgrad"] = amsgrad;
}

void AdamOptions::from_json(const nlohmann::json& j) {
  OptimizerOptions::from_json(j);
  if (j.contains("betas")) {
    beta1 = j.at("betas").at(0).get<double>();
    beta2 = j.at("betas").at(1).get<double>();
  }
  if (j.contains("eps")) eps = j.at("eps").get<double>();
  if (j.contains("amsgrad")) amsgrad = j.at("amsgrad").get<bool>();
}

Adam::Adam(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
           double weight_decay, bool amsgrad)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))},
           make_adam_options(lr, betas, eps, weight_decay, amsgrad)) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults)
    : Adam("Adam", std::move(groups), defaults, /*decoupled=*/false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& defaults, bool decoupled)
    : Optimizer(std::move(name), std::move(groups), (check_adam_options(defaults), defaults.clone())),
      decoupled_weight_decay_(decoupled) {}

AdamW::AdamW(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
             double weight_decay, bool amsgrad)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))},
            make_adam_options(lr, betas, eps, weight_decay, amsgrad)) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamOptions& defaults)
    : Adam("AdamW", std::move(groups), defaults, /*decoupled=*/true) {}

void Adam::check_options(const ParamGroup& group) const {
  check_adam_options(group.options_as<AdamOptions>());
}

void Adam::step_group(ParamGroup& group) {
  const AdamOptions& o = group.options_as<AdamOptions>();
  std::vector<AdamStepArgs> all;
  for (Tensor& p : group.params) {
    if (!p.grad().defined()) continue;
    AdamStepArgs args;
    args.param = p;
    args.grad = grad_in_layout(p);
    ParamState& s = state(p);
    const bool needs_state = !s.count("exp_avg") || (o.amsgrad && !s.count("max_exp_avg_sq"));
    if (needs_state && o.capturable) check_not_capturing("the state (exp_avg, exp_avg_sq)");
    if (!s.count("exp_avg")) {
      s["exp_avg"] = zeros_like_param(p);
      s["exp_avg_sq"] = zeros_like_param(p);
    }
    if (o.amsgrad && !s.count("max_exp_avg_sq")) s["max_exp_avg_sq"] = zeros_like_param(p);
    for (const char* key : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"})
      if (s.count(key)) match_layout(s.at(key), p);
    double t = 0.0;
    if (o.capturable) {
      // The step on p's device, counted by the kernel (moved there from the
      // CPU after load_state_dict or a switch to capturable).
      Tensor& step = s["step"];
      if (!step.defined() || step.device() != p.device()) {
        check_not_capturing("the device \"step\"");
        step = step.defined() ? step.to(p.device()) : zeros({}, TensorOptions(kFloat32).device(p.device()));
      }
      args.step_tensor = step;
      args.lr_tensor = device_lr(group, p.device());
    } else {
      Tensor& step = s["step"];
      if (step.defined() && !step.device().is_cpu()) step = step.to(kCPU);  // capturable before: one read
      t = increment_step(s);  // host counter: no device read
    }
    args.exp_avg = s.at("exp_avg");
    args.exp_avg_sq = s.at("exp_avg_sq");
    if (o.amsgrad) args.max_exp_avg_sq = s.at("max_exp_avg_sq");
    args.lr = o.lr;
    args.beta1 = o.beta1;
    args.beta2 = o.beta2;
    args.eps = o.eps;
    args.weight_decay = o.weight_decay;
    args.decoupled_weight_decay = decoupled_weight_decay_;
    if (!o.capturable) {  // else the kernel computes them from the device step
      args.step_size = o.lr / (1.0 - std::pow(o.beta1, t));
      args.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, t));
    }
    all.push_back(std::move(args));
  }
  for (const MultiStepArgs<AdamStepArgs>& kind : group_by_device_and_dtype(std::move(all))) {
    adam_multi_step_stub(kind.tensors.front().param.device())(kind);
    for (const AdamStepArgs& a : kind.tensors) a.param.bump_version();
  }
}

}  // namespace minidl::optim
