// Containers, as torch.nn: Sequential (forward chains its children) and
// ModuleList (holds modules, no forward). Children are named "0", "1", ...
//
//   nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(3, 8, 3).padding(1)), nn::ReLU(),
//                      nn::Flatten(), nn::Linear(8 * 32 * 32, 10));
//   net->push_back(nn::Dropout(0.1));
//   Tensor y = net(x);                       // each child's forward(const Tensor&)
//   net[0], net->at<nn::Conv2dImpl>(0).weight
//
// Both iterate their children registry, so replace_module("1", ...) takes
// effect in forward. Note that `nn::Sequential b(a)` copies the handle `a`
// (aliases it); to nest a Sequential, pass it with other modules or push_back it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "minidl/core/check.h"
#include "minidl/nn/module.h"

namespace minidl::nn {

// A module handle or a shared_ptr to a module.
template <class T>
concept ModuleLike = ModuleHolderType<T> ||
                     requires(const std::remove_cvref_t<T>& p) { { p } -> std::convertible_to<std::shared_ptr<Module>>; };

template <ModuleLike M>
std::shared_ptr<Module> as_module_ptr(M&& m) {
  if constexpr (ModuleHolderType<M>)
    return m.ptr();
  else
    return std::shared_ptr<Module>(std::forward<M>(m));
}

// Shared by Sequential and ModuleList: numbered children and indexing.
class ModuleListBase : public Module {
 public:
  using Module::Module;

  template <ModuleLike M>
  void push_back(M&& module) {
    push_back_ptr(as_module_ptr(std::forward<M>(module)));
  }
  size_t size() const { return children_registry().size(); }
  bool is_empty() const { return size() == 0; }
  // Negative indices count from the end, as in Python.
  std::shared_ptr<Module> operator[](int64_t index) const;
  std::shared_ptr<Module> ptr(int64_t index) const { return (*this)[index]; }
  // The child as its Impl type: seq->at<nn::LinearImpl>(0).weight.
  template <class T>
  T& at(int64_t index) const {
    auto* typed = dynamic_cast<T*>((*this)[index].get());
    MINIDL_CHECK(typed != nullptr, name(), "::at: module ", index, " is a ", (*this)[index]->name(),
                 ", not the requested type");
    return *typed;
  }

  // Iterates the child modules (std::shared_ptr<Module>) in order.
  class Iterator {
   public:
    using Inner = std::vector<std::pair<std::string, std::shared_ptr<Module>>>::const_iterator;
    explicit Iterator(Inner it) : it_(it) {}
    const std::shared_ptr<Module>& operator*() const { return it_->second; }
    Iterator& operator++() { ++it_; return *this; }
    bool operator==(const Iterator& o) const = default;

   private:
    Inner it_;
  };
  Iterator begin() const { return Iterator(children_registry().begin()); }
  Iterator end() const { return Iterator(children_registry().end()); }

 private:
  void push_back_ptr(std::shared_ptr<Module> module);
};

class SequentialImpl : public ModuleListBase {
 public:
  SequentialImpl() : ModuleListBase("Sequential") {}
  template <ModuleLike... Ms>
    requires(sizeof...(Ms) > 0)
  explicit SequentialImpl(Ms&&... modules) : ModuleListBase("Sequential") {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  // Runs the children in order, each on the previous output (the input if empty).
  Tensor forward(const Tensor& input) override;
};
MINIDL_MODULE(Sequential);

class ModuleListImpl : public ModuleListBase {
 public:
  ModuleListImpl() : ModuleListBase("ModuleList") {}
  template <ModuleLike... Ms>
    requires(sizeof...(Ms) > 0)
  explicit ModuleListImpl(Ms&&... modules) : ModuleListBase("ModuleList") {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  // No forward: call the children yourself (the base forward() throws).
};
MINIDL_MODULE(ModuleList);

}  // namespace minidl::nn
