// SGD, as torch.optim.SGD (single-tensor path), per element with g the gradient:
//   g = g + weight_decay * p                       (if weight_decay != 0)
//   b = g                                          (first step: no dampening)
//   b = momentum * b + (1 - dampening) * g         (later steps)
//   g = nesterov ? g + momentum * b : b            (if momentum != 0)
//   p = p - lr * g
// State: "momentum_buffer" (only when momentum != 0). Overwrites p in place.
#include "optim/sgd.h"

#include "core/dtype.h"

namespace minidl::optim {

namespace {

template <class T>
void sgd_kernel(T* p, const T* grad, T* buf, int64_t n, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, bool first_step) {
  const T wd = static_cast<T>(weight_decay), mom = static_cast<T>(momentum);
  const T one_minus_damp = static_cast<T>(1.0 - dampening), neg_lr = static_cast<T>(-lr);
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i];
    if (weight_decay != 0.0) g = g + wd * p[i];
    if (buf != nullptr) {
      buf[i] = first_step ? g : buf[i] * mom + one_minus_damp * g;
      g = nesterov ? g + mom * buf[i] : buf[i];
    }
    p[i] = p[i] + neg_lr * g;
  }
}

void check_sgd_options(const SGDOptions& o) {
  MINIDL_CHECK(o.lr >= 0.0, "Invalid learning rate: ", o.lr);
  MINIDL_CHECK(o.momentum >= 0.0, "Invalid momentum value: ", o.momentum);
  MINIDL_CHECK(o.weight_decay >= 0.0, "Invalid weight_decay value: ", o.weight_decay);
  MINIDL_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
               "Nesterov momentum requires a momentum and zero dampening");
}

SGDOptions make_sgd_options(double lr, double momentum, double dampening, double weight_decay, bool nesterov) {
  SGDOptions o(lr);
  o.momentum = momentum;
  o.dampening = dampening;
  o.weight_decay = weight_decay;
  o.nesterov = nesterov;
  check_sgd_options(o);
  return o;
}

}  // namespace

void SGDOptions::to_json(nlohmann::json& j) const {
  OptimizerOptions::to_json(j);
  j["momentum"] = momentum;
  j["dampening"] = dampening;
  j["nesterov"] = nesterov;
}

void SGDOptions::from_json(const nlohmann::json& j) {
  OptimizerOptions::from_json(j);
  if (j.contains("momentum")) momentum = j.at("momentum").get<double>();
  if (j.contains("dampening")) dampening = j.at("dampening").get<double>();
  if (j.contains("nesterov")) nesterov = j.at("nesterov").get<bool>();
}

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double dampening, double weight_decay,
         bool nesterov)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))},
          make_sgd_options(lr, momentum, dampening, weight_decay, nesterov)) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults)
    : Optimizer("SGD", std::move(groups), (check_sgd_options(defaults), defaults.clone())) {}

void SGD::step_group(ParamGroup& group) {
  const SGDOptions& o = group.options_as<SGDOptions>();
  check_sgd_options(o);  // a group's options may have been edited since
  for (Tensor& p : group.params) {
    if (!p.grad().defined()) continue;
    Tensor grad = checked_grad(p);
    Tensor buf;
    bool first_step = false;
    if (o.momentum != 0.0) {
      Tensor& slot = state(p)["momentum_buffer"];
      first_step = !slot.defined();
      if (first_step) slot = empty_like(p);
      buf = slot;
    }
    MINIDL_DISPATCH_FLOATING(p.dtype(), "SGD", [&] {
      sgd_kernel<scalar_t>(p.data_ptr<scalar_t>(), grad.data_ptr<scalar_t>(),
                           buf.defined() ? buf.data_ptr<scalar_t>() : nullptr, p.numel(), o.lr, o.momentum,
                           o.dampening, o.weight_decay, o.nesterov, first_step);
    });
    p.bump_version();
  }
}

}  // namespace minidl::optim
