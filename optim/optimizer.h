// Optimizer: the base class of SGD, Adam and AdamW, with the semantics of
// torch.optim.Optimizer:
//   - parameters live in parameter groups; each group has its own options
//     (lr, weight_decay and the optimizer's own fields), so schedulers and
//     users can change one group's lr without touching the others;
//   - per-parameter state (momentum buffers, Adam moments, "step") is created
//     lazily at the parameter's first step; the tensors on the parameter's
//     device and dtype, except "step", a CPU counter (PyTorch's default, not
//     capturable): the bias corrections are computed from it on the host, so a
//     step never reads device memory;
//   - parameters may live on any device: each update is one multi-tensor
//     kernel call per device and dtype of a group through ops/fused_optim.h
//     (a few launches on CUDA, PyTorch's fused/foreach path);
//   - step() runs under no_grad and skips parameters without a gradient;
//   - capturable (PyTorch's option of that name, here for SGD too): the
//     update reads the lr, and Adam its step counts, from device memory, so a
//     step captured into a CUDA graph (core/cuda_graph.h) follows the lr
//     schedule when replayed. Call write_device_lr() before each replay;
//     step() does it itself outside a capture. The state ("step", momentum
//     buffers, moments) and the device lr are made by a first step, which
//     must not be inside the capture: step() refuses;
//   - state_dict() names parameters by their index over all groups in order,
//     as PyTorch does: tensors "state.<index>.<name>" and a JSON
//     "param_groups" entry [{"lr": ..., "params": [0, 1]}, ...], so a checkpoint
//     is one safetensors file (OptimizerStateDict::save / load). The state
//     tensors stay on their device in the dict (saving copies them through
//     the host); loading moves each to its parameter's device.
//
//   auto opt = optim::SGD(model->parameters(), /*lr=*/0.1, /*momentum=*/0.9);
//   // a second group with its own options (a copy of the defaults, edited):
//   optim::SGDOptions head = opt.defaults_as<optim::SGDOptions>();
//   head.lr = 0.01;
//   opt.add_param_group({head_params, head});
//   opt.zero_grad(); loss.backward(); opt.step();
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "minidl/core/check.h"
#include "minidl/core/tensor.h"

namespace minidl::optim {

// The options of one parameter group. Each optimizer derives its own struct
// (SGDOptions, AdamOptions) adding its fields, and says how they read and
// write as JSON (the param_groups entry of state_dict, PyTorch's key names).
struct OptimizerOptions {
  double lr = 1e-3;
  double weight_decay = 0.0;
  // PyTorch's group["initial_lr"]: set by the first LR scheduler attached to
  // the optimizer; schedulers count from it.
  std::optional<double> initial_lr;
  // See the file comment. In state_dict's param_groups only when true.
  bool capturable = false;

  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual void to_json(nlohmann::json& j) const;    // lr, weight_decay, initial_lr
  virtual void from_json(const nlohmann::json& j);  // missing keys keep their value
};

// Helper for the derived structs: clone() by copy.
template <class Derived>
struct OptionsBase : OptimizerOptions {
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

struct ParamGroup {
  std::vector<Tensor> params;
  // Null until the group is added to an optimizer: then it gets a copy of the
  // optimizer's defaults. Copying a group copies its options.
  std::unique_ptr<OptimizerOptions> options;

  ParamGroup(std::vector<Tensor> params) : params(std::move(params)) {}  // NOLINT: implicit, as a dict in PyTorch
  ParamGroup(std::vector<Tensor> params, const OptimizerOptions& options)
      : params(std::move(params)), options(options.clone()) {}
  ParamGroup(const ParamGroup& other)
      : params(other.params), options(other.options ? other.options->clone() : nullptr) {}
  ParamGroup(ParamGroup&&) = default;
  ParamGroup& operator=(const ParamGroup& other) {
    if (this != &other) *this = ParamGroup(other);
    return *this;
  }
  ParamGroup& operator=(ParamGroup&&) = default;

  double lr() const { return checked().lr; }
  void set_lr(double lr) { checked().lr = lr; }
  // The options as the optimizer's own type: group.options_as<SGDOptions>().momentum.
  template <class O>
  O& options_as() const {
    auto* o = dynamic_cast<O*>(&checked());
    MINIDL_CHECK(o != nullptr, "ParamGroup::options_as: the group's options are of another optimizer");
    return *o;
  }

 private:
  OptimizerOptions& checked() const {
    MINIDL_CHECK(options != nullptr, "ParamGroup: the group has no options until it is added to an optimizer");
    return *options;
  }
};

// An optimizer's state as named tensors plus metadata: what state_dict()
// gives and load_state_dict() takes; save()/load() go through safetensors.
struct OptimizerStateDict {
  std::vector<std::pair<std::string, Tensor>> tensors;  // "state.<param index>.<name>"
  std::map<std::string, std::string> metadata;          // "optimizer": "SGD", "param_groups": JSON

  void save(const std::string& path) const;
  static OptimizerStateDict load(const std::string& path);
};

class Optimizer {
 public:
  // One parameter's state, by name ("momentum_buffer", "exp_avg", "step", ...).
  using ParamState = std::map<std::string, Tensor>;

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const std::string& name() const { return name_; }

  // Runs one update of every parameter that has a gradient, under no_grad.
  // Every group's options, gradients and state are checked first, so a bad
  // group (options edited since, a gradient of the wrong dtype) changes nothing.
  void step();
  // Resets every parameter's gradient: to undefined (set_to_none, the default,
  // as PyTorch 2.x) or to zeros in place.
  void zero_grad(bool set_to_none = true);

  // Refuses an empty group, a non-leaf or non-floating parameter, a parameter
  // already in another group, and options of another optimizer's type.
  void add_param_group(ParamGroup group);
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const OptimizerOptions& defaults() const { return *defaults_; }
  template <class O>
  O defaults_as() const {
    auto* o = dynamic_cast<const O*>(defaults_.get());
    MINIDL_CHECK(o != nullptr, name_, ".defaults_as: the defaults are of another type");
    return *o;
  }

  // Capturable groups: writes each group's current lr into its device lr
  // tensors (a fill kernel, the value as its argument: no host sync). Before
  // every replay of a captured step; a no-op for groups not capturable.
  void write_device_lr();

  // The state of one parameter (empty until its first step).
  ParamState& state(const Tensor& param);
  bool has_state(const Tensor& param) const;

  OptimizerStateDict state_dict() const;
  // Takes the group options and the per-parameter state from `state`, which
  // must come from an optimizer of the same type with groups of the same
  // sizes (PyTorch's checks and messages). State tensors are copied to
  // their parameter's dtype and device, except "step" (float32, on the CPU).
  void load_state_dict(const OptimizerStateDict& state);

 protected:
  // Derived constructors check their options first, then call this.
  Optimizer(std::string name, std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults);

  // Throws when a group's options are invalid (they may have been edited
  // since the group was added); step() asks before any update.
  virtual void check_options(const ParamGroup& /*group*/) const {}
  // Updates the parameters of one group that have a gradient (under no_grad).
  virtual void step_group(ParamGroup& group) = 0;

  // For step_group: the gradient of `param` laid out as `param` (step() has
  // checked that it fits: a dense param, same dtype, shape and device).
  static Tensor grad_in_layout(const Tensor& param);
  // A parameter's state is laid out as the parameter (the step kernels walk
  // them together as flat arrays): new state as zeros in its layout, and a
  // state loaded from a checkpoint (contiguous) converted when it differs;
  // also to the parameter's dtype after Module::to(dtype) (PyTorch's in-place
  // updates cast the same way).
  static Tensor zeros_like_param(const Tensor& param);
  static void match_layout(Tensor& state_tensor, const Tensor& param);

  // For capturable groups: the group's lr as a 0-d float64 tensor on
  // `device`, made (and filled) at its first use, which must not be inside a
  // CUDA graph capture.
  Tensor device_lr(const ParamGroup& group, Device device);
  // Throws (naming the optimizer and `what`) when the current CUDA stream is
  // capturing: lazily made state must come from a warm-up step.
  void check_not_capturing(const char* what) const;

 private:
  // step()'s checks of one parameter with a gradient: its gradient and its
  // state tensors (size and device; "step" aside) fit it.
  void check_param(const Tensor& param) const;

  std::string name_;
  std::unique_ptr<OptimizerOptions> defaults_;
  std::vector<ParamGroup> groups_;
  std::unordered_map<const TensorImpl*, ParamState> state_;
  // Capturable groups' device lr tensors, by group index (groups are only
  // ever added) and device. Kept for the optimizer's life: a captured graph
  // reads their addresses.
  std::vector<std::pair<size_t, Tensor>> device_lr_;
};

// Reads and bumps the "step" entry of a parameter's state (a 0-d float32
// tensor, as PyTorch's), creating it at 0. Returns the new step.
double increment_step(Optimizer::ParamState& state);

}  // namespace minidl::optim
