// SGD, as torch.optim.SGD (single-tensor path), per element with g the gradient:
//   g = g + weight_decay * p                       (if weight_decay != 0)
//   b = g                                          (first step: no dampening)
//   b = momentum * b + (1 - dampening) * g         (later steps)
//   g = nesterov ? g + momentum * b : b            (if momentum != 0)
//   p = p - lr * g
// capturable: lr read from the optimizer's device lr tensor (ops/fused_optim.h).
// State: "momentum_buffer" (only when momentum != 0), on p's device. One
// sgd_multi_step_stub call per (device, dtype) of a group's parameters
// (ops/fused_optim.h: a few launches on CUDA); overwrites p in place.
#include "minidl/optim/sgd.h"

#include "minidl/ops/fused_optim.h"

namespace minidl::optim {

namespace {

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

void SGD::check_options(const ParamGroup& group) const {
  check_sgd_options(group.options_as<SGDOptions>());
}

void SGD::step_group(ParamGroup& group) {
  const SGDOptions& o = group.options_as<SGDOptions>();
  std::vector<SgdStepArgs> all;
  for (Tensor& p : group.params) {
    if (!p.grad().defined()) continue;
    SgdStepArgs args;
    args.param = p;
    args.grad = grad_in_layout(p);
    if (o.momentum != 0.0) {
      Tensor& slot = state(p)["momentum_buffer"];
      args.first_step = !slot.defined();
      // A graph would replay the first step's b = g forever.
      if (args.first_step && o.capturable) check_not_capturing("the momentum buffer");
      if (args.first_step)
        slot = empty_like(p, MemoryFormat::Preserve);  // the kernel writes b = g
      else
        match_layout(slot, p);
      args.momentum_buffer = slot;
    }
    args.lr = o.lr;
    args.momentum = o.momentum;
    args.dampening = o.dampening;
    args.weight_decay = o.weight_decay;
    args.nesterov = o.nesterov;
    if (o.capturable) args.lr_tensor = device_lr(group, p.device());
    all.push_back(std::move(args));
  }
  for (const MultiStepArgs<SgdStepArgs>& kind : group_by_device_and_dtype(std::move(all))) {
    sgd_multi_step_stub(kind.tensors.front().param.device())(kind);
    for (const SgdStepArgs& a : kind.tensors) a.param.bump_version();
  }
}

}  // namespace minidl::optim
