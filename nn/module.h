// nn::Module: the base class of every layer and model, with PyTorch's
// semantics (torch.nn.Module): ordered, named parameters, buffers and child
// modules; train/eval; to(device/dtype); state_dict / load_state_dict.
//
// A layer is written as `XImpl : Module` plus MINIDL_MODULE(X), which makes X a
// cheap shared handle (nn/holder.h), as in PyTorch's C++ API:
//
//   struct NetImpl : nn::Module {
//     NetImpl() : Module("Net") {
//       fc = register_module("fc", nn::Linear(4, 10));       // child "fc"
//       scale = register_parameter("scale", ones({10}));      // parameter "scale"
//       register_buffer("steps", zeros({}, kInt64));          // buffer, moves with to(), saved
//     }
//     Tensor forward(const Tensor& x) override { return fc(x) * scale; }
//     nn::Linear fc{nullptr};
//     Tensor scale;
//   };
//   MINIDL_MODULE(Net);
//
// Registering in the constructor (or a reset() it calls) in a fixed order is
// what gives named_parameters() and state_dict() their stable order. BatchNorm
// registers its buffers like this:
//   running_mean = register_buffer("running_mean", zeros({C}));
//   running_var  = register_buffer("running_var", ones({C}));
//   num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
// to(kFloat64) converts floating parameters and buffers only, so the int64
// counter stays int64 (as PyTorch).
//
// Undefined tensors (PyTorch's `None`): register_parameter("weight", Tensor())
// (affine=False) or register_buffer("running_mean", Tensor())
// (track_running_stats=False) reserves the name but registers no tensor: it is
// absent from parameters(), buffers(), state_dict() and load_state_dict(), and
// registering a defined tensor under that name later replaces it.
//
// Swappable children (nn::AnyModule): replace_module() changes the registry; a
// typed member such as `nn::BatchNorm2d bn1;` cannot follow it (it can only
// hold a BatchNorm2d). A child that may be swapped later (BN -> GroupNorm by
// nn::convert_batch_norm_to_group_norm, or by hand) is held as an AnyModule
// and registered through it; replace_module then re-points the member too:
//   bn1 = register_module("bn1", nn::AnyModule(nn::BatchNorm2d(64)));
//   Tensor forward(const Tensor& x) override { return bn1(conv1(x)); }
//   nn::AnyModule bn1;
//
// Handles stay valid: a Tensor is a shared handle to a TensorImpl, and every
// method here that changes values (to(), load_state_dict(), zero_grad()) works
// on that same TensorImpl, so the `weight` member of a layer and the tensors an
// optimizer holds keep seeing the module's data. to() copies into new storage
// and then points the existing TensorImpl at it (storage, dtype, strides);
// views taken from a parameter before to() keep the old storage. Do not call
// to() between a forward and its backward.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "minidl/core/device.h"
#include "minidl/core/dtype.h"
#include "minidl/core/tensor.h"
#include "minidl/nn/holder.h"
#include "minidl/nn/options.h"

namespace minidl::nn {

class Module;

// A member handle to a child module of any type, called through the
// single-tensor forward. Copies alias one slot; registering it with
// Module::register_module(name, AnyModule) binds that slot to the child's
// registry entry, so replace_module(name, m) makes every copy call m.
//   nn::AnyModule norm(nn::BatchNorm2d(8));   // explicit: a plain holder is not bound
//   norm(x); norm->train(false); norm.ptr_as<nn::BatchNorm2dImpl>()
class AnyModule {
 public:
  AnyModule() = default;  // empty
  explicit AnyModule(std::shared_ptr<Module> module);
  template <ModuleHolderType Holder>
  explicit AnyModule(const Holder& holder) : AnyModule(std::shared_ptr<Module>(holder.ptr())) {}

  Tensor operator()(const Tensor& input) const;  // get()->forward(input)
  Module* operator->() const { return get(); }
  Module& operator*() const { return *get(); }
  Module* get() const;  // throws when empty
  std::shared_ptr<Module> ptr() const { return slot_ ? *slot_ : nullptr; }
  // The module as T (nullptr when it is not a T), e.g. after a swap.
  template <class T>
  std::shared_ptr<T> ptr_as() const {
    return std::dynamic_pointer_cast<T>(ptr());
  }
  bool is_empty() const { return ptr() == nullptr; }
  explicit operator bool() const { return !is_empty(); }

 private:
  friend class Module;
  std::shared_ptr<std::shared_ptr<Module>> slot_;
};

// Called with the module and its input before a forward that runs them (see
// Module::register_forward_pre_hook).
using ForwardPreHook = std::function<void(Module& module, const Tensor& input)>;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What load_state_dict found (PyTorch's _IncompatibleKeys).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the model, not in the state
  std::vector<std::string> unexpected_keys;  // in the state, not in the model
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  // `name` is the class name shown by name(), printing and load errors ("Conv2d").
  explicit Module(std::string name = "Module");
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }

  // The common single-input forward, so containers (Sequential) can chain
  // modules. Modules with other signatures define their own forward(...).
  // The default throws "Module X has no single-tensor forward(); call its own forward".
  virtual Tensor forward(const Tensor& input);

  // ---- registration --------------------------------------------------------
  // Names must be non-empty, contain no ".", and be unused by this module's
  // parameters, buffers and children ("attribute 'weight' already exists"),
  // except that an undefined entry may be replaced. The returned reference
  // stays valid for the module's lifetime.
  // The parameter must be a leaf; requires_grad is set on it (in place).
  Tensor& register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  // A non-persistent buffer moves with to() but is left out of state_dict().
  Tensor& register_buffer(const std::string& name, Tensor tensor, bool persistent = true);

  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // A holder (nn::Linear, ...) comes back as the same holder type.
  template <ModuleHolderType Holder>
  Holder register_module(const std::string& name, Holder holder) {
    add_child(name, holder.ptr());
    return holder;
  }
  // Registers member's module and binds member's slot to the entry, so that
  // replace_module(name, m) also re-points member (and its copies) at m.
  AnyModule register_module(const std::string& name, AnyModule member);
  // Swaps the child called `name` for `module` and returns the old one.
  // The registry changes (parameters(), state_dict(), printing, and
  // Sequential's forward follow it), and so do AnyModule members registered
  // under `name`. A typed member the parent kept (`nn::BatchNorm2d bn1`) still
  // points to the old module: hold swappable children as nn::AnyModule.
  std::shared_ptr<Module> replace_module(const std::string& name, std::shared_ptr<Module> module);
  template <ModuleHolderType Holder>
  Holder replace_module(const std::string& name, Holder holder) {
    replace_module(name, std::static_pointer_cast<Module>(holder.ptr()));
    return holder;
  }

  // ---- traversal (PyTorch's order: own entries first, then children in
  // registration order, depth first). Shared tensors/modules appear once. ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;  // "layer1.0.bn1.weight"
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // Preorder, self first with the name "" (needs the module to be owned by a
  // shared_ptr, as every holder's is).
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true);
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(bool include_self = true);
  // The child called `name`; throws naming the module when there is none.
  std::shared_ptr<Module> child(const std::string& name) const;

  // Calls fn on every child (recursively) and then on this module (PyTorch's apply).
  void apply(const std::function<void(Module&)>& fn);

  // ---- modes and state ------------------------------------------------------
  virtual void train(bool on = true);  // sets this module and all children
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // An eval-locked module stays in eval mode: train(true) on it or on a parent
  // leaves it in eval (its children still follow). Locking also puts it in
  // eval now; unlocking leaves the mode as it is (call train() to change it).
  // nn::freeze_batch_norm locks BatchNorm layers this way.
  void set_eval_locked(bool locked);
  bool is_eval_locked() const { return eval_locked_; }

  // ---- forward pre-hooks (torch.nn.Module.register_forward_pre_hook, minus
  // the input replacement). They run where a module's forward calls
  // run_forward_pre_hooks(input), at its start; BatchNorm1d/2d/3d do, so the
  // hooks see every call, whether through a holder, a container or ->forward().
  // A module whose forward does not call it never runs its hooks.
  HookId register_forward_pre_hook(ForwardPreHook hook);
  void remove_forward_pre_hook(HookId id);  // unknown ids are ignored

  // set_to_none: grads become undefined; otherwise they are zeroed in place.
  void zero_grad(bool set_to_none = true);
  // Sets requires_grad on every parameter of this module and its children
  // (PyTorch's module.requires_grad_: model->backbone->requires_grad_(false)
  // freezes a submodule); buffers are left alone. Returns this module.
  Module& requires_grad_(bool requires_grad = true);

  // Moves/converts every parameter and buffer (and existing grads) in place;
  // to(DType) converts floating tensors only. See the header comment.
  void to(Device device);
  void to(DType dtype);
  // PyTorch's module.to(memory_format=...): every 4-D parameter and buffer
  // (conv weights) laid out as `fmt` (ChannelsLast or Contiguous), values
  // unchanged. A channels-last conv weight saves conv2d its per-call
  // conversion; optimizers keep each parameter's state in its layout, and
  // state_dict() and checkpoints are the same as for NCHW weights.
  void to(MemoryFormat fmt);

  // Parameters then persistent buffers of each module, preorder, with
  // PyTorch's dotted names. The tensors are detached and share the data.
  NamedTensors state_dict() const;
  // Copies values in place (no grad, converting dtype) so existing handles see
  // them. Nothing is copied unless every matching key has the right shape.
  // strict: missing or unexpected keys throw PyTorch's message
  //   Error(s) in loading state_dict for Net:
  //   	Missing key(s) in state_dict: "fc.bias".
  //   	Unexpected key(s) in state_dict: "fc.b".
  // A shape mismatch throws in either mode ("size mismatch for fc.weight: ...").
  LoadStateDictResult load_state_dict(const NamedTensors& state, bool strict = true);

  // ---- printing --------------------------------------------------------------
  // The part inside the parentheses of PyTorch's repr: "3, 64, kernel_size=(3, 3), ..."
  virtual std::string extra_repr() const { return ""; }
  // PyTorch's repr: Name(extra) or, with children, one "(name): child" line each.
  virtual void pretty_print(std::ostream& os) const;

 protected:
  // The children registry itself, for containers that iterate it on every
  // forward (Sequential, ModuleList) without copying.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children_registry() const {
    return children_;
  }
  // Runs the forward pre-hooks in registration order (a forward calls this first).
  void run_forward_pre_hooks(const Tensor& input);
  // A buffer that older checkpoints may lack: load_state_dict keeps its
  // current value instead of reporting the key missing (as PyTorch's
  // BatchNorm does for num_batches_tracked, added in PyTorch 0.4.1).
  virtual bool is_optional_state(const std::string& /*buffer_name*/) const { return false; }

 private:
  struct TensorEntry {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  bool in_subtree_of(const Module& root) const;  // this is root or one of its descendants
  void check_new_name(const std::string& name, const char* what) const;
  TensorEntry* find_entry(std::vector<std::unique_ptr<TensorEntry>>& list, const std::string& name);
  void named_modules_impl(const std::string& prefix, std::vector<const Module*>& seen,
                          std::vector<std::pair<std::string, const Module*>>& out) const;
  std::vector<std::pair<std::string, const Module*>> walk(bool recurse) const;
  void sort_unexpected_keys(std::vector<std::string>& keys) const;
  // optional (if given) receives the keys of is_optional_state buffers.
  void state_dict_impl(const std::string& prefix, NamedTensors& out, std::set<std::string>* optional = nullptr) const;
  void collect_state_targets(const std::string& prefix, NamedTensors& out) const;
  void convert_tensors(const std::function<Tensor(const Tensor&)>& convert, bool floating_only);

  std::string name_;
  bool training_ = true;
  bool eval_locked_ = false;
  // AnyModule slots bound to children by name (weak: the members own them).
  std::vector<std::pair<std::string, std::weak_ptr<std::shared_ptr<Module>>>> bound_slots_;
  std::vector<std::pair<HookId, ForwardPreHook>> forward_pre_hooks_;
  HookId next_hook_id_ = 0;
  // unique_ptr entries: references returned by register_* survive later registrations.
  std::vector<std::unique_ptr<TensorEntry>> parameters_;
  std::vector<std::unique_ptr<TensorEntry>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& os, const Module& module);

inline Tensor AnyModule::operator()(const Tensor& input) const { return get()->forward(input); }

template <class Impl>
std::ostream& operator<<(std::ostream& os, const ModuleHolder<Impl>& holder) {
  return os << *holder;
}

}  // namespace minidl::nn
