// nn::Module: registries, traversal in PyTorch's order, train/eval, to(),
// state_dict/load_state_dict and printing. See nn/module.h for the semantics.
#include "minidl/nn/module.h"

#include <algorithm>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"

namespace minidl::nn {

namespace {

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Points an existing TensorImpl at the data of `fresh`, so every handle to the
// impl (module members, optimizer state) sees the converted tensor.
void retarget(TensorImpl& impl, const Tensor& fresh) {
  const TensorImpl& f = *fresh.impl();
  impl.set_view(f, f.shape, f.strides, f.offset);
}

// A shape as PyTorch prints it in load_state_dict's messages: torch.Size([3, 4]).
std::string torch_size(const Shape& shape) { return "torch.Size(" + shape_str(shape) + ")"; }

// PyTorch's _addindent: indents every line but the first.
std::string add_indent(const std::string& s, int spaces) {
  std::string out;
  const std::string pad(static_cast<size_t>(spaces), ' ');
  for (char c : s) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

}  // namespace

// ---- AnyModule ------------------------------------------------------------------

AnyModule::AnyModule(std::shared_ptr<Module> module)
    : slot_(std::make_shared<std::shared_ptr<Module>>(std::move(module))) {}

Module* AnyModule::get() const {
  MINIDL_CHECK(slot_ && *slot_, "Accessing an empty AnyModule");
  return slot_->get();
}

Module::Module(std::string name) : name_(std::move(name)) {}

Tensor Module::forward(const Tensor&) {
  MINIDL_FAIL("Module ", name_, " has no single-tensor forward(); call its own forward");
}

// ---- registration -------------------------------------------------------------

void Module::check_new_name(const std::string& name, const char* what) const {
  MINIDL_CHECK(!name.empty(), what, " name can't be empty string \"\"");
  MINIDL_CHECK(name.find('.') == std::string::npos, what, " name can't contain \".\", got: ", name);
  auto taken = [&](const std::vector<std::unique_ptr<TensorEntry>>& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e->name == name; });
  };
  const bool child_taken = std::any_of(children_.begin(), children_.end(),
                                       [&](const auto& c) { return c.first == name; });
  MINIDL_CHECK(!taken(parameters_) && !taken(buffers_) && !child_taken, "attribute '", name,
               "' already exists");
}

Module::TensorEntry* Module::find_entry(std::vector<std::unique_ptr<TensorEntry>>& list,
                                        const std::string& name) {
  for (auto& e : list)
    if (e->name == name) return e.get();
  return nullptr;
}

Tensor& Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  if (tensor.defined()) {
    MINIDL_CHECK(tensor.is_leaf(), "Cannot assign non-leaf Tensor to parameter '", name,
                 "'. Model parameters must be created explicitly. To express '", name,
                 "' as a function of another Tensor, compute the value in the forward() method.");
    tensor.requires_grad_(requires_grad);
  }
  // An undefined entry (PyTorch's None) may be filled in later.
  if (TensorEntry* e = find_entry(parameters_, name); e && !e->tensor.defined()) {
    e->tensor = std::move(tensor);
    return e->tensor;
  }
  check_new_name(name, "parameter");
  parameters_.push_back(std::make_unique<TensorEntry>(TensorEntry{name, std::move(tensor), true}));
  return parameters_.back()->tensor;
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  if (TensorEntry* e = find_entry(buffers_, name); e && !e->tensor.defined()) {
    e->tensor = std::move(tensor);
    e->persistent = persistent;
    return e->tensor;
  }
  check_new_name(name, "buffer");
  buffers_.push_back(std::make_unique<TensorEntry>(TensorEntry{name, std::move(tensor), persistent}));
  return buffers_.back()->tensor;
}

bool Module::in_subtree_of(const Module& root) const {
  if (&root == this) return true;
  for (const auto& [child_name, child] : root.children_)
    if (in_subtree_of(*child)) return true;
  return false;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  MINIDL_CHECK(module != nullptr, "register_module: module '", name, "' is empty (nullptr)");
  // A cycle would make state_dict(), train() and printing recurse without end.
  MINIDL_CHECK(!in_subtree_of(*module), "register_module: module '", name,
               "' contains this module (a module cannot be its own descendant)");
  check_new_name(name, "module");
  children_.emplace_back(name, std::move(module));
}

AnyModule Module::register_module(const std::string& name, AnyModule member) {
  MINIDL_CHECK(!member.is_empty(), "register_module: module '", name, "' is empty (nullptr)");
  add_child(name, member.ptr());
  bound_slots_.emplace_back(name, member.slot_);
  return member;
}

std::shared_ptr<Module> Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  MINIDL_CHECK(module != nullptr, "replace_module: the new module for '", name, "' is empty (nullptr)");
  MINIDL_CHECK(!in_subtree_of(*module), "replace_module: the new module for '", name,
               "' contains this module (a module cannot be its own descendant)");
  for (auto& [child_name, child] : children_) {
    if (child_name == name) {
      std::swap(child, module);
      // Re-point the AnyModule members bound to this entry; forget dead ones.
      std::erase_if(bound_slots_, [](const auto& b) { return b.second.expired(); });
      for (auto& [slot_name, weak_slot] : bound_slots_)
        if (auto slot = weak_slot.lock(); slot && slot_name == name) *slot = child;
      return module;  // the old one
    }
  }
  MINIDL_FAIL("'", name_, "' object has no child module '", name, "'");
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& [child_name, child] : children_)
    if (child_name == name) return child;
  MINIDL_FAIL("'", name_, "' object has no child module '", name, "'");
}

// ---- traversal -----------------------------------------------------------------

void Module::named_modules_impl(const std::string& prefix, std::vector<const Module*>& seen,
                                std::vector<std::pair<std::string, const Module*>>& out) const {
  if (std::find(seen.begin(), seen.end(), this) != seen.end()) return;
  seen.push_back(this);
  out.emplace_back(prefix, this);
  for (const auto& [name, child] : children_) child->named_modules_impl(join_name(prefix, name), seen, out);
}

// This module alone, or all modules preorder (each once).
std::vector<std::pair<std::string, const Module*>> Module::walk(bool recurse) const {
  std::vector<std::pair<std::string, const Module*>> out;
  if (!recurse) {
    out.emplace_back("", this);
    return out;
  }
  std::vector<const Module*> seen;
  named_modules_impl("", seen, out);
  return out;
}

namespace {
// Members of every walked module, each tensor once (PyTorch's _named_members).
template <class Entries>
NamedTensors named_members(const std::vector<std::pair<std::string, const Module*>>& mods,
                           const Entries& entries_of) {
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  for (const auto& [prefix, m] : mods) {
    for (const auto& [name, t] : entries_of(*m)) {
      if (!t.defined() || !seen.insert(t.impl()).second) continue;
      out.emplace_back(join_name(prefix, name), t);
    }
  }
  return out;
}
}  // namespace

NamedTensors Module::named_parameters(bool recurse) const {
  return named_members(walk(recurse), [](const Module& m) {
    NamedTensors own;
    for (const auto& e : m.parameters_) own.emplace_back(e->name, e->tensor);
    return own;
  });
}

NamedTensors Module::named_buffers(bool recurse) const {
  return named_members(walk(recurse), [](const Module& m) {
    NamedTensors own;
    for (const auto& e : m.buffers_) own.emplace_back(e->name, e->tensor);
    return own;
  });
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(bool include_self) {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::set<const Module*> seen{this};
  if (include_self) {
    std::shared_ptr<Module> self = weak_from_this().lock();
    MINIDL_CHECK(self != nullptr, "modules()/named_modules(): module ", name_,
                 " is not owned by a std::shared_ptr (make it with a module holder or "
                 "std::make_shared), so it cannot hand out a pointer to itself; "
                 "use include_self=false");
    out.emplace_back("", std::move(self));
  }
  // Preorder: a stack of children still to visit, reversed so the first child pops first.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> stack(children_.rbegin(), children_.rend());
  while (!stack.empty()) {
    auto [name, m] = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(m.get()).second) continue;
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(join_name(name, it->first), it->second);
    out.emplace_back(std::move(name), std::move(m));
  }
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [name, m] : named_modules(include_self)) out.push_back(std::move(m));
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, child] : children_) child->apply(fn);
  fn(*this);
}

// ---- modes and state ----------------------------------------------------------------

void Module::train(bool on) {
  training_ = on && !eval_locked_;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::set_eval_locked(bool locked) {
  eval_locked_ = locked;
  if (locked) training_ = false;
}

HookId Module::register_forward_pre_hook(ForwardPreHook hook) {
  MINIDL_CHECK(hook != nullptr, "register_forward_pre_hook: the hook is empty");
  forward_pre_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

void Module::remove_forward_pre_hook(HookId id) {
  std::erase_if(forward_pre_hooks_, [id](const auto& h) { return h.first == id; });
}

void Module::run_forward_pre_hooks(const Tensor& input) {
  if (forward_pre_hooks_.empty()) return;
  // A copy: a hook may add or remove hooks.
  const auto hooks = forward_pre_hooks_;
  for (const auto& [id, hook] : hooks) hook(*this, input);
}

Module& Module::requires_grad_(bool requires_grad) {
  for (Tensor& p : parameters()) p.requires_grad_(requires_grad);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      // PyTorch's zero_grad: detach_() only a gradient with history; a
      // gradient that is a view (DDP's gradient_as_bucket_view) has none and
      // would refuse detach_().
      if (g.grad_fn()) g.detach_();
      else g.requires_grad_(false);
      g.zero_();
    }
  }
}

void Module::convert_tensors(const std::function<Tensor(const Tensor&)>& convert, bool floating_only) {
  NoGradGuard no_grad;
  std::set<const TensorImpl*> seen;
  auto convert_one = [&](const Tensor& t) {
    if (!t.defined() || !seen.insert(t.impl()).second) return;
    if (floating_only && !is_floating(t.dtype())) return;
    TensorImpl& impl = *t.impl();
    Tensor fresh = convert(t.detach());
    if (fresh.impl()->storage != impl.storage) retarget(impl, fresh);
    if (impl.grad) {
      Tensor g(impl.grad);
      Tensor fresh_grad = convert(g.detach());
      if (fresh_grad.impl()->storage != impl.grad->storage) retarget(*impl.grad, fresh_grad);
    }
  };
  for (const auto& [prefix, m] : walk(true)) {
    for (const auto& e : m->parameters_) convert_one(e->tensor);
    for (const auto& e : m->buffers_) convert_one(e->tensor);
  }
}

void Module::to(Device device) {
  // to(device) keeps a channels-last layout (a channels-last weight stays so).
  convert_tensors([device](const Tensor& t) { return t.to(device); }, /*floating_only=*/false);
}

void Module::to(DType dtype) {
  MINIDL_CHECK(is_floating(dtype), "nn.Module.to only accepts floating point dtypes, but got desired dtype=",
               dtype_name(dtype));
  convert_tensors([dtype](const Tensor& t) { return t.to(dtype); }, /*floating_only=*/true);
}

void Module::to(MemoryFormat fmt) {
  MINIDL_CHECK(fmt != MemoryFormat::Preserve, "nn.Module.to: expected memory_format torch.contiguous_format or ",
               "torch.channels_last, got torch.preserve_format");
  convert_tensors([fmt](const Tensor& t) { return t.dim() == 4 ? t.contiguous(fmt) : t; }, /*floating_only=*/false);
}

// Parameters then persistent buffers of this module, then each child (no
// de-duplication: a shared child appears under each of its names, as PyTorch).
void Module::state_dict_impl(const std::string& prefix, NamedTensors& out, std::set<std::string>* optional) const {
  for (const auto& e : parameters_)
    if (e->tensor.defined()) out.emplace_back(prefix + e->name, e->tensor);
  for (const auto& e : buffers_) {
    if (!e->tensor.defined() || !e->persistent) continue;
    out.emplace_back(prefix + e->name, e->tensor);
    if (optional && is_optional_state(e->name)) optional->insert(prefix + e->name);
  }
  for (const auto& [name, child] : children_) child->state_dict_impl(prefix + name + ".", out, optional);
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  state_dict_impl("", out);
  for (auto& [name, t] : out) t = t.detach();
  return out;
}

// PyTorch reports an unexpected key from the module whose _load_from_state_dict
// finds it (the deepest one its dotted prefix names), modules in preorder, and
// in state-dict order within a module.
void Module::sort_unexpected_keys(std::vector<std::string>& keys) const {
  std::map<std::string, size_t> preorder;  // module prefix ("" for this one, "fc." ...) -> position
  std::function<void(const Module&, const std::string&)> number = [&](const Module& m, const std::string& prefix) {
    preorder.emplace(prefix, preorder.size());
    for (const auto& [name, child] : m.children_) number(*child, prefix + name + ".");
  };
  number(*this, "");
  auto owner = [&](const std::string& key) {
    const Module* m = this;
    size_t begin = 0;
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', begin)) {
      const std::string part = key.substr(begin, dot - begin);
      const auto it = std::find_if(m->children_.begin(), m->children_.end(),
                                   [&](const auto& c) { return c.first == part; });
      if (it == m->children_.end()) break;
      m = it->second.get();
      begin = dot + 1;
    }
    return preorder.at(key.substr(0, begin));
  };
  std::stable_sort(keys.begin(), keys.end(),
                   [&](const std::string& a, const std::string& b) { return owner(a) < owner(b); });
}

LoadStateDictResult Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors targets;
  std::set<std::string> optional;
  state_dict_impl("", targets, &optional);

  std::map<std::string, const Tensor*> given;  // a dict in PyTorch: one tensor per key
  for (const auto& [name, t] : state)
    MINIDL_CHECK(given.emplace(name, &t).second, "load_state_dict: the key '", name,
                 "' appears more than once in the state_dict");

  LoadStateDictResult result;
  std::vector<std::string> size_errors;
  std::vector<std::pair<Tensor, Tensor>> copies;
  std::set<std::string> known;
  for (const auto& [name, target] : targets) {
    known.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      if (!optional.count(name)) result.missing_keys.push_back(name);
      continue;
    }
    Tensor src = *it->second;
    MINIDL_CHECK(src.defined(), "load_state_dict: the tensor for key '", name, "' is undefined");
    // PyTorch's backward compatibility (checkpoints of 0.3): a 0-d parameter or
    // buffer takes a 1-element 1-D tensor, e.g. num_batches_tracked = tensor([7]).
    if (target.dim() == 0 && src.dim() == 1 && src.size(0) == 1) src = src.reshape({});
    if (src.shape() != target.shape()) {
      size_errors.push_back("size mismatch for " + name + ": copying a param with shape " + torch_size(src.shape()) +
                            " from checkpoint, the shape in current model is " + torch_size(target.shape()) + ".");
      continue;
    }
    copies.emplace_back(target, src);
  }
  for (const auto& [name, t] : state)
    if (!known.count(name)) result.unexpected_keys.push_back(name);
  sort_unexpected_keys(result.unexpected_keys);

  // PyTorch's message: missing keys, then unexpected keys (strict only), then size mismatches.
  std::vector<std::string> errors;
  auto quoted_list = [](const std::vector<std::string>& keys) {
    std::string s;
    for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", \"" : "\"") + keys[i] + "\"";
    return s;
  };
  if (strict && !result.missing_keys.empty())
    errors.push_back("Missing key(s) in state_dict: " + quoted_list(result.missing_keys) + ". ");
  if (strict && !result.unexpected_keys.empty())
    errors.push_back("Unexpected key(s) in state_dict: " + quoted_list(result.unexpected_keys) + ". ");
  errors.insert(errors.end(), size_errors.begin(), size_errors.end());
  if (!errors.empty()) {
    std::string msg = "Error(s) in loading state_dict for " + name_ + ":";
    for (const auto& e : errors) msg += "\n\t" + e;
    MINIDL_FAIL(msg);
  }

  NoGradGuard no_grad;
  for (auto& [target, src] : copies) {
    Tensor dst = target;
    dst.copy_(src);
  }
  return result;
}

// ---- printing -------------------------------------------------------------------------

void Module::pretty_print(std::ostream& os) const {
  const std::string extra = extra_repr();
  std::vector<std::string> lines;
  if (!extra.empty()) {
    std::istringstream in(extra);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  const size_t extra_lines = lines.size();
  for (const auto& [name, child] : children_) {
    std::ostringstream child_os;
    child->pretty_print(child_os);
    lines.push_back("(" + name + "): " + add_indent(child_os.str(), 2));
  }
  os << name_ << "(";
  if (extra_lines == 1 && children_.empty()) {
    os << lines[0];
  } else if (!lines.empty()) {
    os << "\n";
    for (const auto& line : lines) os << "  " << line << "\n";
  }
  os << ")";
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  module.pretty_print(os);
  return os;
}

}  // namespace minidl::nn
