// Adam / AdamW, as torch.optim.Adam (single-tensor path), per element with g
// the gradient and t the step (counted from 1):
//   AdamW: p = p * (1 - lr * weight_decay)      Adam: g = g + weight_decay * p
//   m = m + (1 - beta1) * (g - m)               (lerp towards g)
//   v = beta2 * v + (1 - beta2) * g * g
//   v_max = max(v_max, v)                       (amsgrad; v_max replaces v below)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p = p - lr / (1 - beta1^t) * m / denom
// State: "step" (0-d float32), "exp_avg", "exp_avg_sq", "max_exp_avg_sq"
// (amsgrad). Overwrites p in place.
#include "optim/adam.h"

#include <cmath>

#include "core/dtype.h"

namespace minidl::optim {

namespace {

struct AdamStepConstants {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  double step_size;              // lr / (1 - beta1^t)
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

template <class T>
void adam_kernel(T* p, const T* grad, T* m, T* v, T* v_max, int64_t n, const AdamStepConstants& c) {
  const T wd = static_cast<T>(c.weight_decay), decay = static_cast<T>(1.0 - c.lr * c.weight_decay);
  const T w1 = static_cast<T>(1.0 - c.beta1), b2 = static_cast<T>(c.beta2), w2 = static_cast<T>(1.0 - c.beta2);
  const T bc2 = static_cast<T>(c.bias_correction2_sqrt), eps = static_cast<T>(c.eps);
  const T neg_step = static_cast<T>(-c.step_size);
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i];
    if (c.weight_decay != 0.0) {
      if (c.decoupled)
        p[i] = p[i] * decay;
      else
        g = g + wd * p[i];
    }
    m[i] = m[i] + w1 * (g - m[i]);
    v[i] = v[i] * b2 + w2 * g * g;
    T second = v[i];
    if (v_max != nullptr) {
      v_max[i] = std::max(v_max[i], v[i]);
      second = v_max[i];
    }
    const T denom = std::sqrt(second) / bc2 + eps;
    p[i] = p[i] + neg_step * (m[i] / denom);
  }
}

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

void Adam::step_group(ParamGroup& group) {
  const AdamOptions& o = group.options_as<AdamOptions>();
  check_adam_options(o);  // a group's options may have been edited since
  for (Tensor& p : group.params) {
    if (!p.grad().defined()) continue;
    Tensor grad = checked_grad(p);
    ParamState& s = state(p);
    if (!s.count("exp_avg")) {
      s["exp_avg"] = zeros_like(p);
      s["exp_avg_sq"] = zeros_like(p);
    }
    if (o.amsgrad && !s.count("max_exp_avg_sq")) s["max_exp_avg_sq"] = zeros_like(p);
    const double t = increment_step(s);
    AdamStepConstants c{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, decoupled_weight_decay_,
                        o.lr / (1.0 - std::pow(o.beta1, t)), std::sqrt(1.0 - std::pow(o.beta2, t))};
    Tensor m = s.at("exp_avg"), v = s.at("exp_avg_sq");
    Tensor v_max = o.amsgrad ? s.at("max_exp_avg_sq") : Tensor();
    MINIDL_CHECK(m.dtype() == p.dtype() && v.dtype() == p.dtype() && m.numel() == p.numel() &&
                     v.numel() == p.numel() && (!v_max.defined() || v_max.numel() == p.numel()),
                 name(), ": the state of a parameter does not match it (dtype or size)");
    MINIDL_DISPATCH_FLOATING(p.dtype(), name().c_str(), [&] {
      adam_kernel<scalar_t>(p.data_ptr<scalar_t>(), grad.data_ptr<scalar_t>(), m.data_ptr<scalar_t>(),
                            v.data_ptr<scalar_t>(), v_max.defined() ? v_max.data_ptr<scalar_t>() : nullptr,
                            p.numel(), c);
    });
    p.bump_version();
  }
}

}  // namespace minidl::optim
