// Optimizer base: parameter groups, lazy per-parameter state, zero_grad, and
// the state_dict format (see optimizer.h). The update math lives in the
// kernels of ops/fused_optim.h, called by the optimizers' own files.
#include "minidl/optim/optimizer.h"

#include <cstdint>
#include <typeinfo>
#include <unordered_set>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/cuda_graph.h"
#include "minidl/core/safetensors.h"

namespace minidl::optim {

using json = nlohmann::json;

void OptimizerOptions::to_json(json& j) const {
  j["lr"] = lr;
  j["weight_decay"] = weight_decay;
  if (initial_lr) j["initial_lr"] = *initial_lr;
  if (capturable) j["capturable"] = true;
}

void OptimizerOptions::from_json(const json& j) {
  if (j.contains("lr")) lr = j.at("lr").get<double>();
  if (j.contains("weight_decay")) weight_decay = j.at("weight_decay").get<double>();
  if (j.contains("initial_lr")) initial_lr = j.at("initial_lr").get<double>();
  if (j.contains("capturable")) capturable = j.at("capturable").get<bool>();
}

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups,
                     std::unique_ptr<OptimizerOptions> defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  MINIDL_ASSERT(defaults_ != nullptr);
  size_t total = 0;
  for (const ParamGroup& g : groups) total += g.params.size();
  MINIDL_CHECK(!groups.empty() && total > 0, "optimizer got an empty parameter list");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  MINIDL_CHECK(!group.params.empty(), name_, ".add_param_group: optimizer got an empty parameter list");
  std::unordered_set<const TensorImpl*> others, in_group;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) others.insert(p.impl());
  for (const Tensor& p : group.params) {
    MINIDL_CHECK(p.defined(), name_, ": optimizer can only optimize Tensors, but one of the params is undefined");
    MINIDL_CHECK(p.is_leaf(), "can't optimize a non-leaf Tensor");
    MINIDL_CHECK(is_floating(p.dtype()), name_, ": can only optimize floating-point parameters, got ",
                 dtype_name(p.dtype()));
    // The update kernels run over the storage span (PyTorch steps any layout):
    // refused here already, not at the first step().
    MINIDL_CHECK(is_non_overlapping_and_dense(p), name_,
                 ": expected a dense parameter (contiguous or channels-last), got strides ", shape_str(p.strides()),
                 " for size ", shape_str(p.shape()));
    MINIDL_CHECK(!others.count(p.impl()), "some parameters appear in more than one parameter group");
    // PyTorch warns ("in future, this will cause an error") and then steps
    // such a parameter twice; refused here.
    MINIDL_CHECK(in_group.insert(p.impl()).second, name_,
                 ": optimizer contains a parameter group with duplicate parameters");
  }
  if (group.options) {
    const OptimizerOptions& o = *group.options;
    MINIDL_CHECK(typeid(o) == typeid(*defaults_), name_,
                 ".add_param_group: the group's options belong to another optimizer");
  } else {
    group.options = defaults_->clone();
  }
  groups_.push_back(std::move(group));
}

void Optimizer::step() {
  NoGradGuard no_grad;
  // Outside a capture the device lr follows the group's; inside, the graph
  // reads whatever write_device_lr() put there before the replay.
  if (!device_lr_.empty() && !cuda::is_current_stream_capturing()) write_device_lr();
  for (const ParamGroup& g : groups_) {
    check_options(g);
    for (const Tensor& p : g.params)
      if (p.grad().defined()) check_param(p);
  }
  for (ParamGroup& g : groups_) step_group(g);
}

void Optimizer::write_device_lr() {
  NoGradGuard no_grad;
  for (auto& [index, lr] : device_lr_) lr.fill_(groups_[index].lr());
}

Tensor Optimizer::device_lr(const ParamGroup& group, Device device) {
  const auto index = static_cast<size_t>(&group - groups_.data());
  MINIDL_ASSERT(index < groups_.size(), "device_lr: not a group of this optimizer");
  for (auto& [i, lr] : device_lr_)
    if (i == index && lr.device() == device) return lr;
  check_not_capturing("the device lr");
  Tensor lr = full({}, group.lr(), TensorOptions(kFloat64).device(device));
  device_lr_.emplace_back(index, lr);
  return lr;
}

void Optimizer::check_not_capturing(const char* what) const {
  MINIDL_CHECK(!cuda::is_current_stream_capturing(), name_, "(capturable=True): ", what,
               " is made at a parameter's first step, which cannot be captured in a CUDA graph (it would be made "
               "again at every replay): run a warm-up step before capturing");
}

void Optimizer::zero_grad(bool set_to_none) {
  for (ParamGroup& g : groups_) {
    for (Tensor& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        NoGradGuard no_grad;
        // PyTorch's zero_grad: detach_() only a gradient with history; a
        // gradient that is a view (DDP's gradient_as_bucket_view) has none and
        // would refuse detach_().
        if (grad.grad_fn()) grad.detach_();
        else grad.requires_grad_(false);
        grad.zero_();
      }
    }
  }
}

Optimizer::ParamState& Optimizer::state(const Tensor& param) { return state_[param.impl()]; }

bool Optimizer::has_state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it != state_.end() && !it->second.empty();
}

void Optimizer::check_param(const Tensor& param) const {
  const Tensor& grad = param.grad();
  MINIDL_CHECK(is_non_overlapping_and_dense(param), name_,
               ": expected a dense parameter (contiguous or channels-last), got strides ", shape_str(param.strides()),
               " for size ", shape_str(param.shape()));
  MINIDL_CHECK(grad.dtype() == param.dtype(), name_, ": gradient dtype ", dtype_name(grad.dtype()),
               " does not match parameter dtype ", dtype_name(param.dtype()));
  MINIDL_CHECK(grad.shape() == param.shape(), name_, ": gradient of shape ", shape_str(grad.shape()),
               " does not match parameter of shape ", shape_str(param.shape()));
  MINIDL_CHECK(grad.device() == param.device(), name_, ": the gradient is on ", grad.device(),
               " but the parameter is on ", param.device());
  const auto it = state_.find(param.impl());
  if (it == state_.end()) return;
  for (const auto& [key, t] : it->second) {
    if (key == "step" || !t.defined()) continue;
    MINIDL_CHECK(t.shape() == param.shape() && t.device() == param.device(), name_, ": the state \"", key,
                 "\" of a parameter of shape ", shape_str(param.shape()), " on ", param.device(), " is ",
                 shape_str(t.shape()), " on ", t.device(), " (a state_dict of another model, or the model moved to ",
                 "another device after the optimizer's first step?)");
    MINIDL_CHECK(is_floating(t.dtype()), name_, ": the state \"", key, "\" of a parameter is ",
                 dtype_name(t.dtype()), ", expected a floating dtype");
  }
}

Tensor Optimizer::grad_in_layout(const Tensor& param) {
  return to_layout_of(param.grad(), param);  // the kernels walk parameter, gradient and state as flat arrays
}

Tensor Optimizer::zeros_like_param(const Tensor& param) {
  Tensor t = empty_like(param, MemoryFormat::Preserve);
  t.zero_();
  return t;
}

void Optimizer::match_layout(Tensor& state_tensor, const Tensor& param) {
  // Only a state that fits (else the step kernels' checks name the mismatch).
  if (!state_tensor.defined() || state_tensor.device() != param.device() || state_tensor.shape() != param.shape())
    return;
  if (state_tensor.dtype() != param.dtype()) state_tensor = state_tensor.to(param.dtype());
  state_tensor = to_layout_of(state_tensor, param);
}

double increment_step(Optimizer::ParamState& state) {
  Tensor& step = state["step"];
  if (!step.defined()) step = zeros({}, kFloat32);
  MINIDL_ASSERT(step.device().is_cpu(), "the \"step\" state must stay on the CPU");
  float* s = step.data_ptr<float>();
  *s += 1.0f;
  return static_cast<double>(*s);
}

// ---- state_dict ---------------------------------------------------------------

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict out;
  json groups = json::array();
  int64_t index = 0;
  for (const ParamGroup& g : groups_) {
    json jg = json::object();
    g.options->to_json(jg);
    json ids = json::array();
    for (const Tensor& p : g.params) {
      auto it = state_.find(p.impl());
      if (it != state_.end())
        for (const auto& [key, value] : it->second)
          if (value.defined())
            out.tensors.emplace_back("state." + std::to_string(index) + "." + key, value.clone());
      ids.push_back(index++);
    }
    jg["params"] = ids;
    groups.push_back(jg);
  }
  out.metadata["optimizer"] = name_;
  out.metadata["param_groups"] = groups.dump();
  return out;
}

void Optimizer::load_state_dict(const OptimizerStateDict& state) {
  auto opt_it = state.metadata.find("optimizer");
  MINIDL_CHECK(opt_it != state.metadata.end() && state.metadata.count("param_groups"),
               name_, ".load_state_dict: expected metadata \"optimizer\" and \"param_groups\"");
  MINIDL_CHECK(opt_it->second == name_, name_, ".load_state_dict: the state dict is of a ", opt_it->second,
               " optimizer");
  json groups;
  try {
    groups = json::parse(state.metadata.at("param_groups"));
  } catch (const json::exception& e) {
    MINIDL_FAIL(name_, ".load_state_dict: param_groups is not valid JSON: ", e.what());
  }
  MINIDL_CHECK(groups.is_array() && groups.size() == groups_.size(),
               "loaded state dict has a different number of parameter groups");
  std::vector<Tensor> by_index;
  for (size_t i = 0; i < groups_.size(); ++i) {
    MINIDL_CHECK(groups[i].is_object() && groups[i].contains("params") && groups[i]["params"].is_array() &&
                     groups[i]["params"].size() == groups_[i].params.size(),
                 "loaded state dict contains a parameter group that doesn't match the size of optimizer's group");
    for (const Tensor& p : groups_[i].params) by_index.push_back(p);
  }

  // Parse everything before changing anything, so a bad state leaves the optimizer as it was.
  std::unordered_map<const TensorImpl*, ParamState> new_state;
  for (const auto& [key, value] : state.tensors) {
    const std::string prefix = "state.";
    const size_t dot = key.find('.', prefix.size());
    MINIDL_CHECK(key.rfind(prefix, 0) == 0 && dot != std::string::npos && dot + 1 < key.size(), name_,
                 ".load_state_dict: unexpected key \"", key, "\" (expected state.<index>.<name>)");
    const std::string index_str = key.substr(prefix.size(), dot - prefix.size());
    MINIDL_CHECK(!index_str.empty() && index_str.find_first_not_of("0123456789") == std::string::npos, name_,
                 ".load_state_dict: unexpected key \"", key, "\" (expected state.<index>.<name>)");
    // std::stoul alone would throw std::out_of_range, not minidl::Error, on 20 digits.
    const size_t index = index_str.size() <= 9 ? std::stoul(index_str) : SIZE_MAX;
    MINIDL_CHECK(index < by_index.size(), name_, ".load_state_dict: key \"", key, "\" names parameter ", index_str,
                 " but the optimizer has ", by_index.size());
    const Tensor& param = by_index[index];
    const std::string name = key.substr(dot + 1);
    Tensor copy = value.clone();
    if (name == "step") {  // the step counter stays on the host: the bias corrections are host math
      MINIDL_CHECK(value.numel() == 1 && is_floating(value.dtype()), name_, ".load_state_dict: \"", key,
                   "\" must hold one floating-point value, got shape ", shape_str(value.shape()), " of ",
                   dtype_name(value.dtype()));
      if (!copy.device().is_cpu()) copy = copy.to(kCPU);
      if (copy.dtype() != kFloat32) copy = copy.to(kFloat32);
    } else {
      MINIDL_CHECK(value.shape() == param.shape(), name_, ".load_state_dict: \"", key, "\" has shape ",
                   shape_str(value.shape()), " but parameter ", index, " has shape ", shape_str(param.shape()));
      if (is_floating(copy.dtype()) && copy.dtype() != param.dtype()) copy = copy.to(param.dtype());
      if (copy.device() != param.device()) copy = copy.to(param.device());
    }
    new_state[param.impl()][name] = copy;
  }
  std::vector<std::unique_ptr<OptimizerOptions>> new_options;
  for (size_t i = 0; i < groups_.size(); ++i) {
    new_options.push_back(groups_[i].options->clone());
    try {
      new_options.back()->from_json(groups[i]);
    } catch (const json::exception& e) {
      MINIDL_FAIL(name_, ".load_state_dict: bad param_groups[", i, "]: ", e.what());
    }
  }
  for (size_t i = 0; i < groups_.size(); ++i) groups_[i].options = std::move(new_options[i]);
  state_ = std::move(new_state);
}

void OptimizerStateDict::save(const std::string& path) const { save_safetensors(path, tensors, metadata); }

OptimizerStateDict OptimizerStateDict::load(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  OptimizerStateDict out;
  out.tensors = std::move(file.tensors);
  out.metadata = std::move(file.metadata);
  return out;
}

}  // namespace minidl::optim
